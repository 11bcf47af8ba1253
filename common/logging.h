// rkv's one logging facility: leveled, timestamped lines on stderr.
//
//   RKV_LOG(INFO) << "listening on " << address;
//
// Abseil's logging library is newer than Debian 12's Abseil, so rkv carries
// this small one. A line is written with a single write(2), so lines from
// different threads never interleave.
#ifndef RKV_COMMON_LOGGING_H_
#define RKV_COMMON_LOGGING_H_

#include <sstream>

namespace rkv {

enum class LogSeverity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Lines below this severity are dropped. Defaults to kInfo; the environment
// variable RKV_LOG_LEVEL (debug|info|warning|error) overrides it at start-up.
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();

namespace logging_internal {

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();  // Writes the line; aborts for kFatal.
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Lets RKV_LOG be used as an expression whose stream is skipped when the
// severity is filtered out.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace logging_internal
}  // namespace rkv

#define RKV_LOG_SEVERITY_DEBUG ::rkv::LogSeverity::kDebug
#define RKV_LOG_SEVERITY_INFO ::rkv::LogSeverity::kInfo
#define RKV_LOG_SEVERITY_WARNING ::rkv::LogSeverity::kWarning
#define RKV_LOG_SEVERITY_ERROR ::rkv::LogSeverity::kError
#define RKV_LOG_SEVERITY_FATAL ::rkv::LogSeverity::kFatal

#define RKV_LOG(level)                                                                        \
  (RKV_LOG_SEVERITY_##level < ::rkv::MinLogSeverity())                                        \
      ? (void)0                                                                               \
      : ::rkv::logging_internal::Voidify() &                                                  \
            ::rkv::logging_internal::LogMessage(RKV_LOG_SEVERITY_##level, __FILE__, __LINE__) \
                .stream()

#define RKV_CHECK(cond) \
  if (!(cond)) RKV_LOG(FATAL) << "check failed: " #cond " "

#endif  // RKV_COMMON_LOGGING_H_
