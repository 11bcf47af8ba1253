// Pieces of a cluster, as deterministic tests play them around the real
// cluster client (client/cluster/cluster_client.cc): a map source fed by
// hand or by the simulation (MapSource), and an executor that runs the
// client's connects and fetches on the test's one thread when the test
// says (Executor). cluster_client_test and cluster_simulation_test use
// them.
#ifndef RKV_TESTS_CLIENT_CLUSTER_SIM_CLUSTER_PARTS_H_
#define RKV_TESTS_CLIENT_CLUSTER_SIM_CLUSTER_PARTS_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cluster/executor.h"
#include "client/cluster/map_source.h"
#include "rkvpb/coordinator.pb.h"

namespace rkv::testing {

// The coordinator, as the test plays it: what a fetch answers, and maps
// pushed as the watch stream would.
class HandMaps final : public client_internal::MapSource {
 public:
  // A map the coordinator has and pushes to its watchers.
  void Push(const proto::ClusterMap& map) {
    current_ = map;
    pushed_ = std::make_unique<proto::ClusterMap>(map);
  }
  // A map the coordinator has but whose push the client missed: only a
  // fetch finds it.
  void Set(const proto::ClusterMap& map) { current_ = map; }
  int fetches() const { return fetches_; }

  absl::StatusOr<proto::ClusterMap> Fetch(absl::Duration) override {
    fetches_++;
    return current_;
  }
  void Watch() override {}
  std::unique_ptr<proto::ClusterMap> TakeNewest() override { return std::move(pushed_); }

 private:
  proto::ClusterMap current_;
  std::unique_ptr<proto::ClusterMap> pushed_;
  int fetches_ = 0;
};

// Runs the client's jobs on the test's thread when the test says.
class StepExecutor final : public client_internal::Executor {
 public:
  void Run(std::function<void()> work, std::function<void()> then) override {
    queued_.push_back({std::move(work), std::move(then)});
    runs_++;
  }
  size_t RunFinished() override {
    size_t n = 0;
    while (!finished_.empty()) {
      std::function<void()> then = std::move(finished_.front());
      finished_.pop_front();
      then();
      n++;
    }
    return n;
  }
  size_t pending() const override { return queued_.size() + finished_.size(); }
  void WaitFinished(absl::Duration) override {}

  // Runs the work of the jobs queued now (a connect, a fetch); their
  // continuations run in the client's next Poll.
  void RunQueued() {
    std::deque<Job> jobs = std::move(queued_);
    queued_.clear();
    for (Job& j : jobs) {
      j.work();
      finished_.push_back(std::move(j.then));
    }
  }
  size_t queued() const { return queued_.size(); }
  int runs() const { return runs_; }

 private:
  struct Job {
    std::function<void()> work, then;
  };
  std::deque<Job> queued_;
  std::deque<std::function<void()>> finished_;
  int runs_ = 0;
};

}  // namespace rkv::testing

#endif  // RKV_TESTS_CLIENT_CLUSTER_SIM_CLUSTER_PARTS_H_
