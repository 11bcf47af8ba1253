// The /metrics endpoint a Prometheus server scrapes: plain HTTP/1.1 on a
// thread of its own, one short request at a time (a scrape every few
// seconds needs no more). GET /metrics answers with what `render`
// returns (prometheus_text.h); anything else is 404 or 405.
#ifndef RKV_COMMON_METRICS_ENDPOINT_H_
#define RKV_COMMON_METRICS_ENDPOINT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/socket.h"

namespace rkv {

class MetricsEndpoint {
 public:
  // Listens on `address` (host:port; port 0 picks a free one).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      absl::string_view address, std::function<std::string()> render);
  // Stops serving (a request under way is answered first).
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // host:port as bound.
  const std::string& address() const { return address_; }

 private:
  MetricsEndpoint(Fd listen, std::string address, std::function<std::string()> render);
  void Run();
  void Serve(Fd conn);

  const Fd listen_;
  const std::string address_;
  const std::function<std::string()> render_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace rkv

#endif  // RKV_COMMON_METRICS_ENDPOINT_H_
