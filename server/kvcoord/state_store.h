// Where the coordinator's state (the cluster map: servers, their
// registrations, replica groups, epoch) is kept, and which coordinator may
// change it. Three stores sit behind this interface: etcd (several
// coordinators, one leading; etcd_state_store.h), a file (one process,
// file_state_store.h) and memory (one process that forgets on exit).
//
// A coordinator acts — renews servers' leases, orders fences and pushes,
// changes the state — only while it leads, and only as far as its
// leadership is certain by its own clock (leadership()): a leader that was
// paused or cut off stops acting before another can take over.
#ifndef RKV_SERVER_KVCOORD_STATE_STORE_H_
#define RKV_SERVER_KVCOORD_STATE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rkvpb/coordinator.pb.h"

namespace rkv::server {

// This coordinator's leadership, on its clock (CoordinatorOptions::clock,
// which its store must read too).
struct Leadership {
  uint64_t term = 0;
  // Until when it may renew servers' leases (a server fences itself if not
  // renewed; a new leader counts every lease from its own start).
  absl::Time renew_until = absl::InfinitePast();
  // Until when it may order fences and pushes: never after another
  // coordinator can have taken over.
  absl::Time order_until = absl::InfinitePast();

  bool CanRenew(absl::Time now) const { return now < renew_until; }
  bool CanOrder(absl::Time now) const { return now < order_until; }
};

// For kvctl status.
struct StoreDescription {
  std::string kind;            // "etcd", "file", "memory"
  std::string leader_address;  // As this coordinator knows it; empty: none.
  std::vector<proto::StoreMember> members;
};

class StateStore {
 public:
  // What the store tells the coordinator, one call at a time (a call may
  // wait for the coordinator's lock while a handler is inside Commit; the
  // coordinator may Commit from inside OnLead).
  class Listener {
   public:
    // This coordinator leads from now on, from `state` (its term already
    // the new leadership's, committed; epoch 0: nothing was stored).
    virtual void OnLead(const proto::ClusterMap& state) = 0;
    // Another coordinator leads (or none does yet): `state` is the state
    // as last committed, and the store calls again with each change.
    virtual void OnFollow(const proto::ClusterMap& state) = 0;

   protected:
    ~Listener() = default;
  };

  virtual ~StateStore() = default;
  // Starts following or leading; the listener is called from now on. An
  // error when the stored state cannot be read at all (a file; etcd is
  // read, and read again, on the store's own thread).
  virtual absl::Status Start(Listener& listener) = 0;
  // Stops; a leader hands its leadership on at once (another may take
  // over without waiting for it to lapse).
  virtual void Stop() = 0;
  // Stores `state` as the next state. Refused — and nothing stored —
  // unless this coordinator leads under `state.term()` and the state is as
  // it last stored it. UNAVAILABLE: surely not stored, the leadership
  // stands. Another error may leave the outcome unknown: this coordinator
  // then stops leading, and the store re-reads what is stored and calls
  // the listener before it acts again.
  virtual absl::Status Commit(const proto::ClusterMap& state) = 0;
  virtual Leadership leadership() const = 0;
  // Whether the state this coordinator has is known to be current: it
  // leads, or it follows a leader it hears from. A standby cut off from
  // etcd is not, and sends clients elsewhere.
  virtual bool Current() const = 0;
  // The leader's address as last heard (empty: none known); cheap.
  virtual std::string LeaderAddress() const = 0;
  // May ask etcd's members (a fraction of a second).
  virtual StoreDescription Describe() const = 0;
};

}  // namespace rkv::server

#endif  // RKV_SERVER_KVCOORD_STATE_STORE_H_
