#include "server/kvcoord/replica_group_codec.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rkv::server {
namespace {

using google::protobuf::RepeatedField;
using google::protobuf::RepeatedPtrField;

void AddMembers(const std::vector<Member>& members, RepeatedPtrField<std::string>* ids,
                RepeatedField<uint64_t>* generations) {
  for (const Member& m : members) {
    *ids->Add() = m.id;
    generations->Add(m.generation);
  }
}

absl::StatusOr<std::vector<Member>> Members(const proto::ReplicaGroup& group,
                                            const RepeatedPtrField<std::string>& ids,
                                            const RepeatedField<uint64_t>& generations,
                                            const char* list) {
  if (ids.size() != generations.size()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", group.id(), ": ", ids.size(), " ",
                                                   list, " but ", generations.size(),
                                                   " generations for them"));
  }
  std::vector<Member> members;
  members.reserve(ids.size());
  for (int i = 0; i < ids.size(); ++i) members.push_back({ids[i], generations[i]});
  return members;
}

}  // namespace

proto::ReplicaGroup ToProto(const ReplicaGroup& group) {
  proto::ReplicaGroup p;
  p.set_id(group.id);
  switch (group.state) {
    case GroupState::kServing:
      p.set_state(proto::GROUP_STATE_SERVING);
      break;
    case GroupState::kReconfiguring:
      p.set_state(proto::GROUP_STATE_RECONFIGURING);
      break;
    case GroupState::kLost:
      p.set_state(proto::GROUP_STATE_LOST);
      break;
  }
  p.set_config(group.config);
  p.set_region_bytes(group.region_bytes);
  p.set_forming(group.forming);
  AddMembers(group.members, p.mutable_members(), p.mutable_generations());
  p.mutable_joining()->Assign(group.joining.begin(), group.joining.end());
  AddMembers(group.serving, p.mutable_serving(), p.mutable_serving_generations());
  AddMembers(group.copying, p.mutable_copying(), p.mutable_copying_generations());
  p.set_copied_bytes(group.copied_bytes);
  p.set_copy_bytes(group.copy_bytes);
  return p;
}

absl::StatusOr<ReplicaGroup> FromProto(const proto::ReplicaGroup& p) {
  ReplicaGroup g;
  g.id = p.id();
  switch (p.state()) {
    case proto::GROUP_STATE_SERVING:
      g.state = GroupState::kServing;
      break;
    case proto::GROUP_STATE_RECONFIGURING:
      g.state = GroupState::kReconfiguring;
      break;
    case proto::GROUP_STATE_LOST:
      g.state = GroupState::kLost;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("group ", p.id(), " is in no known state (", p.state(), ")"));
  }
  g.config = p.config();
  g.region_bytes = p.region_bytes();
  g.forming = p.forming();
  RKV_ASSIGN_OR_RETURN(g.serving,
                       Members(p, p.serving(), p.serving_generations(), "serving copies"));
  RKV_ASSIGN_OR_RETURN(g.copying, Members(p, p.copying(), p.copying_generations(), "spares"));
  const std::vector<std::string> member_ids(p.members().begin(), p.members().end());
  if (g.state == GroupState::kLost && p.generations_size() != p.members_size() &&
      member_ids == Ids(g.serving)) {
    // Coordinators before this one left a lost group's generations as they
    // were when it was lost, and its members as its serving copies.
    g.members = g.serving;
  } else {
    RKV_ASSIGN_OR_RETURN(g.members, Members(p, p.members(), p.generations(), "members"));
  }
  if (g.state != GroupState::kLost && g.members.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", p.id(), " serves or reconfigures with no member"));
  }
  g.joining.assign(p.joining().begin(), p.joining().end());
  g.copied_bytes = p.copied_bytes();
  g.copy_bytes = p.copy_bytes();
  return g;
}

}  // namespace rkv::server
