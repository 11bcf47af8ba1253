#include "common/fabric/work_request_check.h"

#include "absl/strings/str_cat.h"

namespace rkv::fabric {

absl::Status CheckWorkRequest(const WorkRequest& wr, uint32_t max_inline_data) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("work request ", wr.wr_id, " (", OpcodeName(wr.opcode), "): ", why));
  };
  switch (wr.opcode) {
    case Opcode::kRead:
    case Opcode::kWrite:
      if (wr.length > kMaxMessageBytes) {
        return bad(absl::StrCat("length ", wr.length, " exceeds ", kMaxMessageBytes));
      }
      break;
    case Opcode::kCas64:
    case Opcode::kFaa64:
      if (wr.length != 8) return bad("atomics move exactly 8 bytes");
      // The address is known here, so refuse here: rdma-core's rxe provider
      // refuses a misaligned atomic at ibv_post_send (EINVAL), where other
      // devices take it and fail it at the target, so only a check before
      // posting gives one behaviour everywhere.
      if (wr.remote_addr % 8 != 0) return bad("atomics need an 8-byte aligned remote address");
      break;
    default:
      return bad("unknown opcode");
  }
  if (wr.length > 0 && wr.local == nullptr) return bad("no local buffer");
  if (wr.flags & kInline) {
    if (wr.opcode != Opcode::kWrite) return bad("only WRITEs may be inline");
    if (wr.length > max_inline_data) {
      return bad(
          absl::StrCat("inline length ", wr.length, " exceeds max_inline_data ", max_inline_data));
    }
  }
  return absl::OkStatus();
}

}  // namespace rkv::fabric
