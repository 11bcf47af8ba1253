#include "client/cluster/background_worker.h"

#include <utility>

namespace rkv::client_internal {

BackgroundWorker::BackgroundWorker(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

BackgroundWorker::~BackgroundWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BackgroundWorker::Run(std::function<void()> work, std::function<void()> then) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_.push_back({std::move(work), std::move(then)});
    pending_++;
  }
  work_ready_.notify_one();
}

void BackgroundWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    Job job = std::move(queued_.front());
    queued_.pop_front();
    lock.unlock();
    job.work();
    lock.lock();
    finished_.push_back(std::move(job.then));
    job_done_.notify_all();
  }
}

size_t BackgroundWorker::RunFinished() {
  size_t n = 0;
  for (;;) {
    std::function<void()> then;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_.empty()) return n;
      then = std::move(finished_.front());
      finished_.pop_front();
      pending_--;
    }
    then();
    n++;
  }
}

size_t BackgroundWorker::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void BackgroundWorker::WaitFinished(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  job_done_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                     [this] { return !finished_.empty(); });
}

}  // namespace rkv::client_internal
