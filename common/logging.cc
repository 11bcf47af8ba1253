#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

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
    case LogSeverity::kDebug: return 'D';
    case LogSeverity::kInfo: return 'I';
    case LogSeverity::kWarning: return 'W';
    case LogSeverity::kError: return 'E';
    case LogSeverity::kFatal: return 'F';
  }
  return '?';
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) { MinSeverity().store(severity); }
LogSeverity MinLogSeverity() { return MinSeverity().load(std::memory_order_relaxed); }

namespace logging_internal {

LogMessage::LogMessage(LogSeverity severity, const char* file, int line)
    : severity_(severity) {
  const char* base = std::strrchr(file, '/');
  stream_ << SeverityLetter(severity) << ' '
          << absl::FormatTime("%Y-%m-%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone())
          << ' ' << (base ? base + 1 : file) << ':' << line << "] ";
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
