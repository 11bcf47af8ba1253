// Where a cluster client's blocking work runs — opening a group's session,
// fetching the map — so that none of its calls waits on the network, and
// where its thread waits when only that work can make progress. The
// client decides what to run and what to do with the result; an executor
// only decides when and on which thread the work runs. By default that is
// BackgroundWorker (background_worker.h): two threads of the client's own.
// The deterministic simulation runs the work on its one thread instead,
// inline or when its schedule says (OpenOptions::executor).
//
// An executor belongs to one client, which destroys it before anything
// its jobs use: a continuation names the client.
#ifndef RKV_CLIENT_CLUSTER_EXECUTOR_H_
#define RKV_CLIENT_CLUSTER_EXECUTOR_H_

#include <cstddef>
#include <functional>

#include "absl/time/time.h"

namespace rkv::client_internal {

class Executor {
 public:
  // Waits for the work running now; work not started, and continuations
  // not run, are dropped.
  virtual ~Executor() = default;

  // Runs `work` (on any thread), then `then` on the client's thread inside
  // a later RunFinished(), never inside Run.
  virtual void Run(std::function<void()> work, std::function<void()> then) = 0;
  // Runs the continuations of the work that ended; returns how many ran.
  virtual size_t RunFinished() = 0;
  // Jobs whose continuation has not run yet.
  virtual size_t pending() const = 0;
  // Waits up to `timeout` for a job's work to end (at once if one has):
  // where the client's thread waits when nothing else can progress.
  virtual void WaitFinished(absl::Duration timeout) = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_CLUSTER_EXECUTOR_H_
