// The soft fabric's wire format over TCP. All integers are little-endian.
//
//   client -> target  Hello          magic "RKVF", version, rest length,
//                                    then (the rest) peer id, token
//   target -> client  HelloReply     magic, status
//   client -> target  RequestHeader  (+ payload for WRITE), any number
//   target -> client  ResponseHeader (+ payload for a successful READ)
//
// The Hello's fixed part is the same in every version, and its third field
// counts the bytes that follow it (version 2 sent the token alone there),
// so that a target reads a Hello of any version whole and answers it with
// kBadVersion instead of leaving an older or newer peer waiting.
//
// Responses come back in request order; a queue pair is one connection.
// The decoders accept any bytes: anything malformed is an error status and
// the target closes that connection.
#ifndef RKV_COMMON_FABRIC_SOFT_SOFT_WIRE_H_
#define RKV_COMMON_FABRIC_SOFT_SOFT_WIRE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/fabric/remote_op.h"
#include "common/fabric/types.h"

namespace rkv::fabric::wire {

inline constexpr uint32_t kHelloMagic = 0x46564B52;  // "RKVF"
// 3: the Hello carries the peer id (QueuePairOptions::peer_id).
inline constexpr uint16_t kVersion = 3;
inline constexpr size_t kHelloFixedBytes = 8;
inline constexpr size_t kMaxTokenBytes = 1024;
inline constexpr size_t kHelloPeerIdBytes = 8;
inline constexpr size_t kMaxHelloRestBytes = kHelloPeerIdBytes + kMaxTokenBytes;
inline constexpr size_t kHelloReplyBytes = 8;
inline constexpr size_t kRequestHeaderBytes = 36;
inline constexpr size_t kResponseHeaderBytes = 16;

// kFenced: the listener fenced the Hello's peer id (Listener::Fence).
enum class HelloStatus : uint8_t { kOk = 0, kBadVersion = 1, kBadToken = 2, kFenced = 3 };

struct Hello {
  uint16_t version = kVersion;
  std::string token;
  uint64_t peer_id = 0;
};

struct RequestHeader {
  RemoteRequest request;
};

struct ResponseHeader {
  CompletionStatus status = CompletionStatus::kSuccess;
  uint32_t length = 0;  // Payload bytes that follow (successful READs).
  uint64_t value = 0;   // Atomics: the old value.
};

// Encodes `hello` as this version does, whatever its `version` says (tests
// set another to play an older or newer peer).
std::string EncodeHello(const Hello& hello);
// Decodes the fixed part (hello->version); returns the length of the rest,
// still to be read.
absl::StatusOr<size_t> DecodeHelloFixed(absl::string_view bytes, Hello* hello);
// Decodes the rest of a Hello of kVersion (peer id and token).
absl::Status DecodeHelloRest(absl::string_view rest, Hello* hello);

std::string EncodeHelloReply(HelloStatus status);
absl::StatusOr<HelloStatus> DecodeHelloReply(absl::string_view bytes);

void EncodeRequestHeader(const RequestHeader& header, uint8_t out[kRequestHeaderBytes]);
absl::StatusOr<RequestHeader> DecodeRequestHeader(absl::string_view bytes);

void EncodeResponseHeader(const ResponseHeader& header, uint8_t out[kResponseHeaderBytes]);
absl::StatusOr<ResponseHeader> DecodeResponseHeader(absl::string_view bytes);

}  // namespace rkv::fabric::wire

#endif  // RKV_COMMON_FABRIC_SOFT_SOFT_WIRE_H_
