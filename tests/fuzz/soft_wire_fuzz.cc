// libFuzzer target: the soft fabric's frame decoders, which read whatever a
// peer sends. Nothing may crash, and a frame that decodes must encode back
// to a frame that decodes the same.
#include <cstring>
#include <string>

#include "common/fabric/soft/soft_wire.h"

namespace w = rkv::fabric::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  w::Hello hello;
  (void)w::DecodeHelloFixed(in, &hello);
  (void)w::DecodeHelloReply(in);
  if (w::Hello rest; w::DecodeHelloRest(in, &rest).ok()) {
    const std::string again = w::EncodeHello(rest);
    w::Hello back;
    auto len = w::DecodeHelloFixed(absl::string_view(again).substr(0, w::kHelloFixedBytes), &back);
    if (!len.ok() || *len != in.size() ||
        !w::DecodeHelloRest(absl::string_view(again).substr(w::kHelloFixedBytes), &back).ok() ||
        back.peer_id != rest.peer_id || back.token != rest.token) {
      __builtin_trap();
    }
  }

  if (auto req = w::DecodeRequestHeader(in); req.ok()) {
    uint8_t out[w::kRequestHeaderBytes];
    w::EncodeRequestHeader(*req, out);
    auto again =
        w::DecodeRequestHeader(absl::string_view(reinterpret_cast<const char*>(out), sizeof(out)));
    if (!again.ok() || again->request.remote_addr != req->request.remote_addr ||
        again->request.length != req->request.length || again->request.swap != req->request.swap) {
      __builtin_trap();
    }
  }
  if (auto resp = w::DecodeResponseHeader(in); resp.ok()) {
    uint8_t out[w::kResponseHeaderBytes];
    w::EncodeResponseHeader(*resp, out);
    auto again =
        w::DecodeResponseHeader(absl::string_view(reinterpret_cast<const char*>(out), sizeof(out)));
    if (!again.ok() || again->status != resp->status || again->length != resp->length ||
        again->value != resp->value) {
      __builtin_trap();
    }
  }
  return 0;
}
