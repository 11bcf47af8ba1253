// The soft fabric's wire format over TCP. All integers are little-endian.
//
//   client -> target  Hello          magic "RKVF", version, token
//   target -> client  HelloReply     magic, status
//   client -> target  RequestHeader  (+ payload for WRITE), any number
//   target -> client  ResponseHeader (+ payload for a successful READ)
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
inline constexpr uint16_t kVersion = 2;
inline constexpr size_t kHelloFixedBytes = 8;
inline constexpr size_t kMaxTokenBytes = 1024;
inline constexpr size_t kHelloReplyBytes = 8;
inline constexpr size_t kRequestHeaderBytes = 36;
inline constexpr size_t kResponseHeaderBytes = 16;

enum class HelloStatus : uint8_t { kOk = 0, kBadVersion = 1, kBadToken = 2 };

struct Hello {
  uint16_t version = kVersion;
  std::string token;
};

struct RequestHeader {
  RemoteRequest request;
};

struct ResponseHeader {
  CompletionStatus status = CompletionStatus::kSuccess;
  uint32_t length = 0;  // Payload bytes that follow (successful READs).
  uint64_t value = 0;   // Atomics: the old value.
};

std::string EncodeHello(const Hello& hello);
// Decodes the fixed part; returns the token length still to be read.
absl::StatusOr<size_t> DecodeHelloFixed(absl::string_view bytes, Hello* hello);

std::string EncodeHelloReply(HelloStatus status);
absl::StatusOr<HelloStatus> DecodeHelloReply(absl::string_view bytes);

void EncodeRequestHeader(const RequestHeader& header, uint8_t out[kRequestHeaderBytes]);
absl::StatusOr<RequestHeader> DecodeRequestHeader(absl::string_view bytes);

void EncodeResponseHeader(const ResponseHeader& header, uint8_t out[kResponseHeaderBytes]);
absl::StatusOr<ResponseHeader> DecodeResponseHeader(absl::string_view bytes);

}  // namespace rkv::fabric::wire

#endif  // RKV_COMMON_FABRIC_SOFT_SOFT_WIRE_H_
