#include "common/fabric/types.h"

namespace rkv::fabric {

const char* OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kRead:
      return "READ";
    case Opcode::kWrite:
      return "WRITE";
    case Opcode::kCas64:
      return "CAS64";
    case Opcode::kFaa64:
      return "FAA64";
  }
  return "UNKNOWN";
}

const char* CompletionStatusName(CompletionStatus status) {
  switch (status) {
    case CompletionStatus::kSuccess:
      return "success";
    case CompletionStatus::kLocalProtectionError:
      return "local protection error";
    case CompletionStatus::kRemoteAccessError:
      return "remote access error";
    case CompletionStatus::kRemoteInvalidRequest:
      return "remote invalid request";
    case CompletionStatus::kFlushed:
      return "flushed";
    case CompletionStatus::kRetryExceeded:
      return "retry exceeded";
    case CompletionStatus::kResponseLost:
      return "response lost";
  }
  return "unknown";
}

WorkRequest WorkRequest::Read(uint64_t wr_id, void* local, uint32_t length, uint32_t lkey,
                              uint64_t remote_addr, uint32_t rkey) {
  WorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::kRead;
  wr.local = local;
  wr.length = length;
  wr.lkey = lkey;
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

WorkRequest WorkRequest::Write(uint64_t wr_id, const void* local, uint32_t length, uint32_t lkey,
                               uint64_t remote_addr, uint32_t rkey) {
  WorkRequest wr = Read(wr_id, const_cast<void*>(local), length, lkey, remote_addr, rkey);
  wr.opcode = Opcode::kWrite;
  return wr;
}

WorkRequest WorkRequest::Cas(uint64_t wr_id, uint64_t* old_value, uint32_t lkey,
                             uint64_t remote_addr, uint32_t rkey, uint64_t expected,
                             uint64_t desired) {
  WorkRequest wr = Read(wr_id, old_value, 8, lkey, remote_addr, rkey);
  wr.opcode = Opcode::kCas64;
  wr.compare_add = expected;
  wr.swap = desired;
  return wr;
}

WorkRequest WorkRequest::Faa(uint64_t wr_id, uint64_t* old_value, uint32_t lkey,
                             uint64_t remote_addr, uint32_t rkey, uint64_t add) {
  WorkRequest wr = Read(wr_id, old_value, 8, lkey, remote_addr, rkey);
  wr.opcode = Opcode::kFaa64;
  wr.compare_add = add;
  return wr;
}

}  // namespace rkv::fabric
