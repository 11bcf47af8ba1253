#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace rkv {
namespace {

LogSeverity InitialSeverity() {
  const char* env = std::getenv("RKV_LOG_LEVEL");
  if (env == nullptr) return LogSeverity::kInfo;
  std::string v(env);
  if (v == "debug") return LogSeverity::kDebug;
  if (v == "warning") return LogSeverity::kWarning;
  if (v == "error") return LogSeverity::kError;
  return LogSeverity::kInfo;
}

std::atomic<LogSeverity>& MinSeverity() {
  static std::atomic<LogSeverity> severity{InitialSeverity()};
  return severity;
}

char SeverityLetter(LogSeverity s) {
  switch (s) {
    case LogSeverity::kDebug:
      return 'D';
    case LogSeverity::kInfo:
      return 'I';
    case LogSeverity::kWarning:
      return 'W';
    case LogSeverity::kError:
      return 'E';
    case LogSeverity::kFatal:
      return 'F';
  }
  return '?';
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) { MinSeverity().store(severity); }
LogSeverity MinLogSeverity() { return MinSeverity().load(std::memory_order_relaxed); }

namespace logging_internal {

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  const char* base = std::strrchr(file, '/');
  // libc rather than absl::FormatTime: Debian's Abseil is not built with
  // ThreadSanitizer, and its lazy time-zone loading shows up as a race.
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm utc;
  gmtime_r(&now.tv_sec, &utc);
  char stamp[96];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02d %02d:%02d:%02d.%06ldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                now.tv_nsec / 1000);
  stream_ << SeverityLetter(severity) << ' ' << stamp << ' ' << (base ? base + 1 : file) << ':'
          << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write(2) keeps concurrent lines whole.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace logging_internal
}  // namespace rkv
