// kvbench on Redis through hiredis: operations are appended to the
// connection's output buffer and their replies read in order, so one Poll
// sends everything started since the last one as a single pipeline.
#include <hiredis/hiredis.h>

#include <deque>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "bench/kvbench/driver.h"
#include "client/protocol/outcome.h"
#include "common/socket.h"

namespace rkv::bench {
namespace {

class RedisDriver final : public Driver {
 public:
  explicit RedisDriver(redisContext* ctx) : ctx_(ctx) {}
  ~RedisDriver() override { redisFree(ctx_); }

  void Read(const std::string& key, ReadCallback done) override {
    redisAppendCommand(ctx_, "GET %b", key.data(), key.size());
    pending_.push_back(std::move(done));
  }
  void Write(const std::string& key, const std::string& value, WriteCallback done) override {
    redisAppendCommand(ctx_, "SET %b %b", key.data(), key.size(), value.data(), value.size());
    pending_.push_back(std::move(done));
  }
  size_t in_flight() const override { return pending_.size(); }

  void Poll(absl::Duration) override {
    // Callbacks may append commands: those wait for the next Poll.
    for (size_t n = pending_.size(); n > 0; --n) {
      void* raw = nullptr;
      absl::StatusOr<std::string> result;
      if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
        result = absl::UnavailableError(absl::StrCat("redis: ", ctx_->errstr));
      } else {
        auto* reply = static_cast<redisReply*>(raw);
        if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS) {
          result = std::string(reply->str, reply->len);
        } else if (reply->type == REDIS_REPLY_NIL) {
          result = absl::NotFoundError("not found");
        } else {
          result = absl::InternalError(absl::StrCat(
              "redis: ", reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply"));
        }
        freeReplyObject(reply);
      }
      Callback done = std::move(pending_.front());
      pending_.pop_front();
      if (auto* read = std::get_if<ReadCallback>(&done)) {
        (*read)(std::move(result));
      } else {
        // A command lost with the connection may have run.
        absl::Status status = result.status();
        if (absl::IsUnavailable(status)) status = client_internal::WithUnknownOutcome(status);
        std::get<WriteCallback>(done)(std::move(status));
      }
    }
  }

 private:
  using Callback = std::variant<ReadCallback, WriteCallback>;
  redisContext* ctx_;
  std::deque<Callback> pending_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Driver>> OpenRedisDriver(const DriverConfig& config) {
  absl::StatusOr<HostPort> where = ParseHostPort(config.address);
  if (!where.ok()) return where.status();
  const timeval timeout{5, 0};
  redisContext* ctx = redisConnectWithTimeout(where->host.c_str(), where->port, timeout);
  if (ctx == nullptr) return absl::ResourceExhaustedError("redisConnect failed");
  if (ctx->err) {
    absl::Status s = absl::UnavailableError(
        absl::StrCat("cannot reach Redis at ", config.address, ": ", ctx->errstr));
    redisFree(ctx);
    return s;
  }
  redisSetTimeout(ctx, timeout);
  return std::make_unique<RedisDriver>(ctx);
}

}  // namespace rkv::bench
