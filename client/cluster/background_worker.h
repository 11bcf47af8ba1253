// The cluster client's executor by default (executor.h): threads that do
// its blocking work — connecting to a server, fetching the cluster map —
// so that none of its calls waits on the network. Each job's continuation
// runs later on the client's own thread, inside RunFinished(), so that it
// may touch the client without locks.
#ifndef RKV_CLIENT_CLUSTER_BACKGROUND_WORKER_H_
#define RKV_CLIENT_CLUSTER_BACKGROUND_WORKER_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "client/cluster/executor.h"

namespace rkv::client_internal {

class BackgroundWorker final : public Executor {
 public:
  explicit BackgroundWorker(int threads);
  // Waits for the jobs running now (each is bounded by its own timeout);
  // jobs not started, and continuations not run, are dropped.
  ~BackgroundWorker() override;
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  // Runs `work` on a worker thread, then `then` inside a RunFinished().
  void Run(std::function<void()> work, std::function<void()> then) override;
  size_t RunFinished() override;
  size_t pending() const override;
  // With no job pending, this is a sleep: the client waits for time to
  // pass (a parked operation's limit).
  void WaitFinished(absl::Duration timeout) override;

 private:
  struct Job {
    std::function<void()> work, then;
  };
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable work_ready_, job_done_;
  std::deque<Job> queued_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> finished_ ABSL_GUARDED_BY(mu_);
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_BACKGROUND_WORKER_H_
