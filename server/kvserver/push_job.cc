#include "server/kvserver/push_job.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace rkv::server {

PushJob::PushJob(RegionServer& region, PushOrder order, uint64_t copy_rate, bool own_thread,
                 std::function<bool(bool live)> while_waiting)
    : region_(region),
      order_(std::move(order)),
      key_(KeyOf(order_)),
      copy_rate_(copy_rate),
      total_(region.PushBytes() * order_.targets.size()),
      while_waiting_(std::move(while_waiting)) {
  std::string names;
  for (const PushOrder::Target& t : order_.targets) {
    absl::StrAppend(&names, names.empty() ? "" : ",", t.id);
  }
  RKV_LOG(INFO) << "group " << order_.group << " config " << order_.config << ": "
                << (order_.live
                        ? absl::StrCat("copying this serving region live to ", names)
                        : absl::StrCat("settling", order_.wipe ? " a blank region" : " this copy",
                                       names.empty() ? "" : " and pushing it to " + names));
  if (own_thread) {
    thread_ = std::thread([this] { Run(); });
  } else {
    Run();
  }
}

PushJob::~PushJob() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

std::string PushJob::KeyOf(const PushOrder& order) {
  std::string key = absl::StrCat(order.group, "/", order.config, order.live ? "/live" : "");
  for (const PushOrder::Target& t : order.targets) {
    absl::StrAppend(&key, "/", t.id, ":", t.generation);
  }
  return key;
}

PushProgress PushJob::Progress() const {
  PushProgress p;
  p.copied_bytes = copied_.load();
  p.copy_bytes = total_;
  p.finished = finished_.load();
  if (p.finished) {
    p.error = error_;
    p.failed_target = failed_target_;
  }
  return p;
}

void PushJob::Run() {
  const absl::Time start = region_.clock()();
  const absl::StatusOr<uint64_t> sent = SettleAndPush();
  if (!sent.ok()) {
    error_ = std::string(sent.status().message());
    RKV_LOG(WARNING) << "push for group " << order_.group << " failed: " << sent.status();
  } else {
    RKV_LOG(INFO) << "push for group " << order_.group << " done: " << (*sent >> 10)
                  << " KiB sent of " << (total_ >> 10) << " KiB in " << region_.clock()() - start;
  }
  finished_ = true;
}

absl::StatusOr<uint64_t> PushJob::SettleAndPush() {
  // A live copy settles nothing: the region serves on, its targets do not.
  if (!order_.live) RKV_RETURN_IF_ERROR(region_.Settle(order_.wipe));
  RegionServer::PushControl control{&copied_, &cancel_, order_.live ? copy_rate_ : 0};
  if (while_waiting_) {
    control.while_waiting = [this] {
      if (while_waiting_(order_.live)) cancel_ = true;
    };
  }
  uint64_t sent = 0;
  for (const PushOrder::Target& t : order_.targets) {
    absl::StatusOr<uint64_t> n = region_.Push(t.region, t.hashes, control);
    if (!n.ok()) {
      failed_target_ = t.id;
      return n.status();
    }
    sent += *n;
  }
  return sent;
}

}  // namespace rkv::server
