// The checks every backend makes at Post, before anything is posted: a
// request that fails one is refused with the whole batch (InvalidArgument),
// so all backends refuse the same requests the same way.
#ifndef RKV_COMMON_FABRIC_WORK_REQUEST_CHECK_H_
#define RKV_COMMON_FABRIC_WORK_REQUEST_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/fabric/types.h"

namespace rkv::fabric {

absl::Status CheckWorkRequest(const WorkRequest& wr, uint32_t max_inline_data);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_WORK_REQUEST_CHECK_H_
