#include "common/metrics_endpoint.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace rkv {
namespace {

// A request line and headers larger than this are not a scrape.
constexpr size_t kMaxRequestBytes = 8 << 10;
// A peer that sends nothing in this time is dropped: it would hold up
// the scrapes after it.
constexpr absl::Duration kRequestTimeout = absl::Seconds(2);

std::string Response(absl::string_view status, absl::string_view type, absl::string_view body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    absl::string_view address, std::function<std::string()> render) {
  RKV_ASSIGN_OR_RETURN(HostPort where, ParseHostPort(address));
  RKV_ASSIGN_OR_RETURN(Fd fd, ListenTcp(where, 16));
  RKV_ASSIGN_OR_RETURN(uint16_t port, LocalPort(fd.get()));
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(std::move(fd), absl::StrCat(where.host, ":", port), std::move(render)));
}

MetricsEndpoint::MetricsEndpoint(Fd listen, std::string address,
                                 std::function<std::string()> render)
    : listen_(std::move(listen)), address_(std::move(address)), render_(std::move(render)) {
  thread_ = std::thread([this] { Run(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  stopping_.store(true);
  thread_.join();
}

void MetricsEndpoint::Run() {
  while (!stopping_.load()) {
    // Polled with a timeout, so that the destructor is seen soon.
    pollfd pfd{listen_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(Fd(fd));
  }
}

void MetricsEndpoint::Serve(Fd conn) {
  if (!SetReceiveTimeout(conn.get(), kRequestTimeout).ok()) return;
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    const ssize_t n = ::recv(conn.get(), buf, sizeof(buf), 0);
    if (n <= 0) return;  // Gone, or silent too long.
    request.append(buf, static_cast<size_t>(n));
  }
  const absl::string_view line = absl::string_view(request).substr(0, request.find("\r\n"));
  std::string response;
  if (!absl::StartsWith(line, "GET ") && !absl::StartsWith(line, "HEAD ")) {
    response = Response("405 Method Not Allowed", "text/plain", "GET /metrics\n");
  } else if (!absl::StartsWith(line.substr(line.find(' ') + 1), "/metrics ") &&
             !absl::StartsWith(line.substr(line.find(' ') + 1), "/metrics?")) {
    response = Response("404 Not Found", "text/plain", "metrics are at /metrics\n");
  } else {
    response = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_());
    if (absl::StartsWith(line, "HEAD ")) response.resize(response.find("\r\n\r\n") + 4);
  }
  if (absl::Status s = WriteFull(conn.get(), response.data(), response.size()); !s.ok()) {
    RKV_LOG(DEBUG) << "metrics endpoint " << address_ << ": " << s;
  }
}

}  // namespace rkv
