#include "common/status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rkv {

absl::Status ErrnoToStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case ENOENT:
    case ENODEV:
      return absl::NotFoundError(message);
    case EEXIST:
    case EADDRINUSE:
      return absl::AlreadyExistsError(message);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(message);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
      return absl::ResourceExhaustedError(message);
    case ETIMEDOUT:
      return absl::DeadlineExceededError(message);
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENOTCONN:
      return absl::UnavailableError(message);
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::UnimplementedError(message);
    default:
      return absl::UnknownError(message);
  }
}

}  // namespace rkv
