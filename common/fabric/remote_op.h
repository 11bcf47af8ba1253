// What the soft NIC does at the target for one request: check the rkey,
// bounds, rights and alignment, then move the data. Shared by the TCP target
// and the deterministic simulation so that both execute requests alike.
#ifndef RKV_COMMON_FABRIC_REMOTE_OP_H_
#define RKV_COMMON_FABRIC_REMOTE_OP_H_

#include <cstddef>
#include <cstdint>

#include "common/fabric/memory_table.h"
#include "common/fabric/types.h"

namespace rkv::fabric {

struct RemoteRequest {
  Opcode opcode = Opcode::kRead;
  uint32_t length = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
};

// Moves bytes [offset, offset + n) of a READ into dst or of a WRITE from
// src. The whole request's range is checked on every call, as a NIC checks
// every packet, so a region deregistered midway stops the transfer.
CompletionStatus ExecuteRead(const MemoryTable& table, const RemoteRequest& req, uint32_t offset,
                             uint32_t n, uint8_t* dst);
CompletionStatus ExecuteWrite(const MemoryTable& table, const RemoteRequest& req, uint32_t offset,
                              uint32_t n, const uint8_t* src);

// Executes a CAS64 or FAA64 atomically against every other atomic on the
// same word; stores the word's previous value in *old_value.
CompletionStatus ExecuteAtomic(const MemoryTable& table, const RemoteRequest& req,
                               uint64_t* old_value);

// Copies between private memory and memory that remote peers may touch
// concurrently. Each aligned 8-byte word of `shared` moves with one relaxed
// atomic access, so words are never torn (as on hardware) while a transfer
// as a whole may interleave with other requests.
void CopyFromShared(uint8_t* dst, const uint8_t* shared, size_t n);
void CopyToShared(uint8_t* shared, const uint8_t* src, size_t n);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_REMOTE_OP_H_
