// Helpers for absl::Status-based error handling used across rkv.
#ifndef RKV_COMMON_STATUS_H_
#define RKV_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rkv {

// Maps an errno value to the closest absl::StatusCode and prefixes the
// message with what was being done, e.g. "connect 127.0.0.1:7000: ...".
absl::Status ErrnoToStatus(int err, absl::string_view what);

}  // namespace rkv

#define RKV_STATUS_CONCAT_INNER_(a, b) a##b
#define RKV_STATUS_CONCAT_(a, b) RKV_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define RKV_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status rkv_status_ = (expr);       \
    if (!rkv_status_.ok()) return rkv_status_; \
  } while (0)

// `RKV_ASSIGN_OR_RETURN(auto x, F());` assigns the value of a StatusOr or
// returns its status from the enclosing function.
#define RKV_ASSIGN_OR_RETURN(lhs, expr) \
  RKV_ASSIGN_OR_RETURN_IMPL_(RKV_STATUS_CONCAT_(rkv_statusor_, __LINE__), lhs, expr)
#define RKV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

#endif  // RKV_COMMON_STATUS_H_
