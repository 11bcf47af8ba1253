// client_hotpath: runs one kind of client operation over and over on the
// deterministic simulated fabric, for counting what the client itself
// executes per operation with callgrind (scripts/client_instructions.sh).
// The simulation makes every run the same, so counts compare exactly
// between builds.
//
// The operations measured are those of a client's steady state: GETs of
// keys in the slot cache (one round trip: the slot and the block), and
// UPDATEs (PUTs of existing keys) whose slot is cached (one round trip: the
// new block's WRITE and the slot's CAS). They run one at a time through
// the asynchronous calls and Poll, inside RunMeasured, which the script
// has callgrind count on its own.
//
//   build/bin/client_hotpath --op=get|update [--ops=N] [--keys=K] [--value_size=B]
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/region/region_client.h"
#include "common/fabric/sim/sim_network.h"
#include "common/flags.h"
#include "common/logging.h"
#include "rkv/client.h"
#include "server/kvserver/region_server.h"

ABSL_FLAG(std::string, op, "get", "The operation measured: get (cached) or update (cached).");
ABSL_FLAG(int, ops, 10000, "Operations measured.");
ABSL_FLAG(int, keys, 100,
          "Keys the operations cycle through; few enough that the cache's entries stay "
          "fresh enough for updates to use them.");
ABSL_FLAG(int, value_size, 100, "Value size in bytes.");

namespace rkv {
namespace {

std::string Key(int i) { return absl::StrCat("user", i); }

// The measured part; not inlined, so that callgrind can dump its counts
// apart from the set-up's (--dump-before/--dump-after).
[[gnu::noinline]] int RunMeasured(Client& client, bool update, int ops,
                                  const std::vector<std::string>& keys, const std::string& value) {
  int failed = 0;
  for (int i = 0; i < ops; ++i) {
    const std::string& key = keys[i % keys.size()];
    bool done = false;
    if (update) {
      client.PutAsync(key, value, [&](absl::Status s) {
        failed += !s.ok();
        done = true;
      });
    } else {
      client.GetAsync(key, [&](absl::StatusOr<std::string> v) {
        failed += !v.ok();
        done = true;
      });
    }
    while (!done) client.Poll();
  }
  return failed;
}

int Run() {
  const std::string op = absl::GetFlag(FLAGS_op);
  RKV_CHECK(op == "get" || op == "update") << "--op must be get or update";
  const bool update = op == "update";
  const int ops = absl::GetFlag(FLAGS_ops);
  const int n = absl::GetFlag(FLAGS_keys);
  RKV_CHECK(n > 0);
  const std::string value(absl::GetFlag(FLAGS_value_size), 'v');

  auto net = std::make_shared<fabric::SimNetwork>(/*seed=*/1);
  std::unique_ptr<fabric::Fabric> server_fabric = net->NewFabric();
  auto server = server::RegionServer::Create(
      *server_fabric, {.region_bytes = 64 << 20, .listen_address = "server"});
  RKV_CHECK(server.ok()) << server.status();
  client_internal::OpenOptions o;
  o.fabric = net->NewFabric();
  o.seed = net->NextSeed();
  // Simulated time: one scheduler step is one microsecond.
  o.clock = [net] { return absl::UnixEpoch() + absl::Microseconds(net->steps()); };
  auto client = client_internal::OpenRegion((*server)->address(), o);
  RKV_CHECK(client.ok()) << client.status();

  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(Key(i));
  for (const std::string& k : keys) RKV_CHECK((*client)->Insert(k, value).ok());
  // Warm-up: every key in the cache, and a round of the measured operation
  // so that what the client keeps between operations has grown to size.
  for (int round = 0; round < 3; ++round) {
    RKV_CHECK(RunMeasured(**client, update, n, keys, value) == 0);
  }

  const OpType type = update ? OpType::kPut : OpType::kGet;
  const OpCosts before = (*client)->costs(type);
  const int failed = RunMeasured(**client, update, ops, keys, value);
  const OpCosts after = (*client)->costs(type);
  const double per_op = ops > 0 ? 1.0 / ops : 0;
  std::cout << absl::StrFormat(
      "%d %s operations, %d failed: %.2f round trips, %.2f requests, %.1f bytes, %.3f retries "
      "per operation\n",
      ops, update ? "cached update" : "cached get", failed,
      (after.round_trips - before.round_trips) * per_op,
      (after.requests - before.requests) * per_op, (after.bytes - before.bytes) * per_op,
      (after.retries - before.retries) * per_op);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rkv

int main(int argc, char** argv) {
  rkv::ParseFlags(argc, argv,
                  "client_hotpath: cached GETs or UPDATEs on the simulated fabric, to count\n"
                  "the client's instructions per operation under callgrind.\n"
                  "Usage: client_hotpath --op=get|update [--ops=N] [--keys=K] [--value_size=B]");
  return rkv::Run();
}
