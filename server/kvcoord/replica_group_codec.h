// Where a ReplicaGroup meets its wire form, proto::ReplicaGroup: in the map
// that clients, servers and kvctl read, and in the coordinator's state
// file. The wire form keeps each server's id and generation in parallel
// lists; these functions are the only code that builds or reads them.
#ifndef RKV_SERVER_KVCOORD_REPLICA_GROUP_CODEC_H_
#define RKV_SERVER_KVCOORD_REPLICA_GROUP_CODEC_H_

#include "absl/status/statusor.h"
#include "rkvpb/coordinator.pb.h"
#include "server/kvcoord/replica_group.h"

namespace rkv::server {

proto::ReplicaGroup ToProto(const ReplicaGroup& group);

// InvalidArgument for a group whose lists are not in step, whose state is
// none of serving, reconfiguring and lost, or that serves or reconfigures
// with no member.
absl::StatusOr<ReplicaGroup> FromProto(const proto::ReplicaGroup& group);

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_REPLICA_GROUP_CODEC_H_
