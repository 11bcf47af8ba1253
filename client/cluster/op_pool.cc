#include "client/cluster/op_pool.h"

#include <utility>

#include "common/monotonic_clock.h"

namespace rkv::client_internal {

OpPtr OpPool::New(OpType type, absl::string_view key, absl::string_view value,
                  Client::GetCallback on_get, Client::DoneCallback on_done) {
  OpPtr op;
  if (idle_.empty()) {
    op = std::make_unique<ClusterOp>();
  } else {
    op = std::move(idle_.back());
    idle_.pop_back();
  }
  op->type = type;
  op->key.assign(key.data(), key.size());
  op->value.assign(value.data(), value.size());
  op->on_get = std::move(on_get);
  op->on_done = std::move(on_done);
  op->retried = false;
  op->needs_fetch = 0;
  op->park_until = absl::InfiniteFuture();
  op->started = MonotonicNow();
  return op;
}

OpPool::Callbacks OpPool::Release(OpPtr op, const absl::Status& status) {
  stats_.Record(op->type, status, MonotonicNow() - op->started);
  Callbacks callbacks{std::move(op->on_get), std::move(op->on_done)};
  op->on_get = nullptr;
  op->on_done = nullptr;
  if (idle_.size() < max_idle_) idle_.push_back(std::move(op));
  return callbacks;
}

}  // namespace rkv::client_internal
