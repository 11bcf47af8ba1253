#include "common/fabric/soft/soft_wire.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/unaligned.h"

namespace rkv::fabric::wire {
namespace {

constexpr uint8_t kRequestMagic = 0xA5;
constexpr uint8_t kResponseMagic = 0x5A;

absl::Status CheckSize(absl::string_view bytes, size_t want, const char* what) {
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", bytes.size(), " bytes, want ", want));
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeHello(const Hello& hello) {
  std::string out(kHelloFixedBytes + kHelloPeerIdBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  Put<uint32_t>(p, 0, kHelloMagic);
  Put<uint16_t>(p, 4, hello.version);
  Put<uint16_t>(p, 6, static_cast<uint16_t>(kHelloPeerIdBytes + hello.token.size()));
  Put<uint64_t>(p, kHelloFixedBytes, hello.peer_id);
  out += hello.token;
  return out;
}

absl::StatusOr<size_t> DecodeHelloFixed(absl::string_view bytes, Hello* hello) {
  if (auto s = CheckSize(bytes, kHelloFixedBytes, "hello"); !s.ok()) return s;
  if (Get<uint32_t>(bytes, 0) != kHelloMagic) {
    return absl::InvalidArgumentError("hello: bad magic (not an rkv soft-fabric peer)");
  }
  hello->version = Get<uint16_t>(bytes, 4);
  const size_t rest = Get<uint16_t>(bytes, 6);
  if (rest > kMaxHelloRestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("hello: ", rest, " bytes after the fixed part"));
  }
  return rest;
}

absl::Status DecodeHelloRest(absl::string_view rest, Hello* hello) {
  if (rest.size() < kHelloPeerIdBytes || rest.size() > kMaxHelloRestBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello: ", rest.size(), " bytes after the fixed part"));
  }
  hello->peer_id = Get<uint64_t>(rest, 0);
  hello->token = std::string(rest.substr(kHelloPeerIdBytes));
  return absl::OkStatus();
}

std::string EncodeHelloReply(HelloStatus status) {
  std::string out(kHelloReplyBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  Put<uint32_t>(p, 0, kHelloMagic);
  Put<uint8_t>(p, 4, static_cast<uint8_t>(status));
  return out;
}

absl::StatusOr<HelloStatus> DecodeHelloReply(absl::string_view bytes) {
  if (auto s = CheckSize(bytes, kHelloReplyBytes, "hello reply"); !s.ok()) return s;
  if (Get<uint32_t>(bytes, 0) != kHelloMagic) {
    return absl::InvalidArgumentError("hello reply: bad magic (not an rkv soft-fabric target)");
  }
  const uint8_t status = Get<uint8_t>(bytes, 4);
  if (status > static_cast<uint8_t>(HelloStatus::kFenced)) {
    return absl::InvalidArgumentError(absl::StrCat("hello reply: unknown status ", status));
  }
  return static_cast<HelloStatus>(status);
}

void EncodeRequestHeader(const RequestHeader& h, uint8_t out[kRequestHeaderBytes]) {
  std::memset(out, 0, kRequestHeaderBytes);
  Put<uint8_t>(out, 0, kRequestMagic);
  Put<uint8_t>(out, 1, static_cast<uint8_t>(h.request.opcode));
  Put<uint32_t>(out, 4, h.request.length);
  Put<uint64_t>(out, 8, h.request.remote_addr);
  Put<uint32_t>(out, 16, h.request.rkey);
  Put<uint64_t>(out, 20, h.request.compare_add);
  Put<uint64_t>(out, 28, h.request.swap);
}

absl::StatusOr<RequestHeader> DecodeRequestHeader(absl::string_view bytes) {
  if (auto s = CheckSize(bytes, kRequestHeaderBytes, "request"); !s.ok()) return s;
  if (Get<uint8_t>(bytes, 0) != kRequestMagic || Get<uint16_t>(bytes, 2) != 0) {
    return absl::InvalidArgumentError("request: bad magic");
  }
  const uint8_t opcode = Get<uint8_t>(bytes, 1);
  if (opcode > static_cast<uint8_t>(Opcode::kFaa64)) {
    return absl::InvalidArgumentError(absl::StrCat("request: unknown opcode ", opcode));
  }
  RequestHeader h;
  h.request.opcode = static_cast<Opcode>(opcode);
  h.request.length = Get<uint32_t>(bytes, 4);
  h.request.remote_addr = Get<uint64_t>(bytes, 8);
  h.request.rkey = Get<uint32_t>(bytes, 16);
  h.request.compare_add = Get<uint64_t>(bytes, 20);
  h.request.swap = Get<uint64_t>(bytes, 28);
  const bool atomic = h.request.opcode == Opcode::kCas64 || h.request.opcode == Opcode::kFaa64;
  if (atomic ? h.request.length != 8 : h.request.length > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("request: bad length ", h.request.length,
                                                   " for ", OpcodeName(h.request.opcode)));
  }
  return h;
}

void EncodeResponseHeader(const ResponseHeader& h, uint8_t out[kResponseHeaderBytes]) {
  std::memset(out, 0, kResponseHeaderBytes);
  Put<uint8_t>(out, 0, kResponseMagic);
  Put<uint8_t>(out, 1, static_cast<uint8_t>(h.status));
  Put<uint32_t>(out, 4, h.length);
  Put<uint64_t>(out, 8, h.value);
}

absl::StatusOr<ResponseHeader> DecodeResponseHeader(absl::string_view bytes) {
  if (auto s = CheckSize(bytes, kResponseHeaderBytes, "response"); !s.ok()) return s;
  if (Get<uint8_t>(bytes, 0) != kResponseMagic || Get<uint16_t>(bytes, 2) != 0) {
    return absl::InvalidArgumentError("response: bad magic");
  }
  const uint8_t status = Get<uint8_t>(bytes, 1);
  if (status > static_cast<uint8_t>(CompletionStatus::kRetryExceeded)) {
    return absl::InvalidArgumentError(absl::StrCat("response: unknown status ", status));
  }
  ResponseHeader h;
  h.status = static_cast<CompletionStatus>(status);
  h.length = Get<uint32_t>(bytes, 4);
  h.value = Get<uint64_t>(bytes, 8);
  if (h.length > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("response: bad length ", h.length));
  }
  return h;
}

}  // namespace rkv::fabric::wire
