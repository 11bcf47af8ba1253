// The Prometheus text format (common/prometheus_text.h) and the /metrics
// endpoint that serves it (common/metrics_endpoint.h).
#include "common/metrics_endpoint.h"

#include <sys/socket.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/prometheus_text.h"
#include "common/socket.h"
#include "gtest/gtest.h"

namespace rkv {
namespace {

TEST(PrometheusTextTest, FamiliesSamplesAndEscapedLabels) {
  PrometheusText m;
  m.Family("rkv_things_total", "counter", "Things done.\nAll of them.");
  m.Sample(uint64_t{18446744073709551615u});
  m.Family("rkv_ratio", "gauge", "A ratio.");
  m.Sample(0.25, {{"kind", "a \"quoted\" \\ value\n"}, {"b", "c"}});
  EXPECT_EQ(m.text(),
            "# HELP rkv_things_total Things done.\\nAll of them.\n"
            "# TYPE rkv_things_total counter\n"
            "rkv_things_total 18446744073709551615\n"
            "# HELP rkv_ratio A ratio.\n"
            "# TYPE rkv_ratio gauge\n"
            "rkv_ratio{kind=\"a \\\"quoted\\\" \\\\ value\\n\",b=\"c\"} 0.25\n");
}

TEST(PrometheusTextTest, AHistogramHasCumulativeBucketsSumAndCount) {
  MetricHistogram h({0.5, 2});
  for (double v : {0.25, 0.5, 1.0, 5.0}) h.Observe(v);
  PrometheusText m;
  m.Histogram("rkv_wait_seconds", "Waits.", h);
  EXPECT_EQ(m.text(),
            "# HELP rkv_wait_seconds Waits.\n"
            "# TYPE rkv_wait_seconds histogram\n"
            "rkv_wait_seconds_bucket{le=\"0.5\"} 2\n"
            "rkv_wait_seconds_bucket{le=\"2\"} 3\n"
            "rkv_wait_seconds_bucket{le=\"+Inf\"} 4\n"
            "rkv_wait_seconds_sum 6.75\n"
            "rkv_wait_seconds_count 4\n");
}

// An HTTP request to the endpoint; the whole response.
std::string Ask(const std::string& address, const std::string& request) {
  auto where = ParseHostPort(address);
  EXPECT_TRUE(where.ok()) << where.status();
  auto fd = ConnectTcp(*where, absl::Seconds(5));
  EXPECT_TRUE(fd.ok()) << fd.status();
  if (!fd.ok()) return "";
  EXPECT_TRUE(WriteFull(fd->get(), request.data(), request.size()).ok());
  EXPECT_TRUE(SetReceiveTimeout(fd->get(), absl::Seconds(5)).ok());
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd->get(), buf, sizeof(buf), 0)) > 0;) response.append(buf, n);
  return response;
}

TEST(MetricsEndpointTest, ServesMetricsAtSlashMetricsAndNothingElse) {
  int scrapes = 0;
  auto endpoint = MetricsEndpoint::Start(
      "127.0.0.1:0", [&scrapes] { return absl::StrCat("rkv_scrapes_total ", ++scrapes, "\n"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string at = (*endpoint)->address();

  // A client that connects and says nothing holds up the next scrape only
  // until its request times out.
  auto silent = ConnectTcp(*ParseHostPort(at), absl::Seconds(5));
  ASSERT_TRUE(silent.ok());

  std::string r = Ask(at, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_TRUE(absl::StrContains(r, "Content-Type: text/plain; version=0.0.4")) << r;
  EXPECT_TRUE(absl::EndsWith(r, "\r\n\r\nrkv_scrapes_total 1\n")) << r;
  r = Ask(at, "GET /metrics?name=x HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(absl::EndsWith(r, "rkv_scrapes_total 2\n")) << r;
  EXPECT_TRUE(absl::StartsWith(Ask(at, "GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 ")) << r;
  EXPECT_TRUE(absl::StartsWith(Ask(at, "POST /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405 "));
  EXPECT_EQ(scrapes, 2);
}

TEST(MetricsEndpointTest, ABadAddressIsAnError) {
  EXPECT_FALSE(MetricsEndpoint::Start("nowhere", [] { return std::string(); }).ok());
}

}  // namespace
}  // namespace rkv
