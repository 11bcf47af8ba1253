#include "common/file_limit.h"

#include <sys/resource.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rkv {

absl::Status EnsureFileLimit(uint64_t minimum) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return ErrnoToStatus(errno, "getrlimit");
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return ErrnoToStatus(errno, "setrlimit");
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < minimum) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the open-file limit is ", limit.rlim_cur,
                     " (hard limit included); this program needs at "
                     "least ",
                     minimum, ": raise it with `ulimit -n` or LimitNOFILE="));
  }
  return absl::OkStatus();
}

}  // namespace rkv
