#include "common/fabric/peer_departures.h"

namespace rkv::fabric {

void PeerDepartures::Opened(uint64_t peer_id) {
  if (peer_id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++open_[peer_id];
}

void PeerDepartures::Closed(uint64_t peer_id) {
  if (peer_id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(peer_id);
  if (it == open_.end() || --it->second > 0) return;
  open_.erase(it);
  if (departed_.size() == kMaxKept) departed_.erase(departed_.begin());
  departed_.push_back(peer_id);
}

std::vector<uint64_t> PeerDepartures::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> gone;
  for (uint64_t id : departed_) {
    if (!open_.contains(id)) gone.push_back(id);
  }
  departed_.clear();
  return gone;
}

}  // namespace rkv::fabric
