// Hooks that break the client's protocol on purpose, so that tests can show
// the linearizability checker catches what they break (OpenBroken in
// client/region/region_client.h). Not installed.
#ifndef RKV_CLIENT_SESSION_BROKEN_PROTOCOL_H_
#define RKV_CLIENT_SESSION_BROKEN_PROTOCOL_H_

namespace rkv::client_internal {

struct BrokenProtocol {
  // Concurrent inserts of one key do not settle which claim wins.
  bool skip_conflict_resolution = false;
  // Blocks are taken as whole without checking their checksum.
  bool skip_block_checksum = false;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_BROKEN_PROTOCOL_H_
