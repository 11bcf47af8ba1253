// A cluster on loopback for the multi-process tests: kvcoord and kvservers
// as real processes (RKV_KVCOORD and RKV_KVSERVER name the programs), each
// in a folder of its own, with region files so that a killed server can
// come back with its keys.
#ifndef RKV_TESTS_CLUSTER_CLUSTER_FIXTURE_H_
#define RKV_TESTS_CLUSTER_CLUSTER_FIXTURE_H_

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/coordinator_stub.h"

namespace rkv::testing {

inline constexpr char kClusterToken[] = "cluster-test-token";
// The coordinator's lease; RKV_TEST_LEASE_MS lengthens it for slow builds
// (the sanitizer runs), where a server may not heartbeat in 600 ms.
inline const int kLeaseMs = [] {
  const char* ms = std::getenv("RKV_TEST_LEASE_MS");
  return ms != nullptr && *ms != '\0' ? std::atoi(ms) : 600;
}();

// A child process, killed (SIGKILL) if still running when destroyed.
class Process {
 public:
  explicit Process(std::vector<std::string> argv) {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // Never outlive the test.
      std::vector<char*> args;
      for (std::string& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Process() { Kill(SIGKILL); }
  // SIGKILL and SIGTERM wait for the process to exit.
  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
};

class ClusterFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/rkv-cluster-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(system(absl::StrCat("rm -rf ", dir_, " && mkdir -p ", dir_).c_str()), 0);
    StartControlPlane();
  }
  void TearDown() override {
    servers_.clear();
    coordinator_.reset();
    StopControlPlane();
    (void)system(absl::StrCat("rm -rf ", dir_).c_str());
  }

  // Copies of every key (kvcoord --replicas).
  virtual int Replicas() const { return 1; }
  // One kvcoord with a state file; sets address_ (what servers and clients
  // are given).
  virtual void StartControlPlane() { StartCoordinator(/*port=*/0); }
  virtual void StopControlPlane() {}

  void StartCoordinator(int port) {
    const std::string port_file = dir_ + "/coord.port";
    unlink(port_file.c_str());
    coordinator_ = std::make_unique<Process>(std::vector<std::string>{
        RKV_KVCOORD, absl::StrCat("--listen=127.0.0.1:", port),
        absl::StrCat("--lease_ms=", kLeaseMs), absl::StrCat("--token=", kClusterToken),
        "--port_file=" + port_file, "--state_file=" + dir_ + "/coord.state",
        absl::StrCat("--replicas=", Replicas())});
    for (int i = 0; i < 200 && port_ == 0; ++i) {
      std::ifstream in(port_file);
      in >> port_;
      if (port_ == 0) absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_NE(port_, 0) << "kvcoord did not start";
    address_ = absl::StrCat("127.0.0.1:", port_);
  }

  void StartServer(const std::string& id) {
    // 32 MiB: room for the load of the replicated tests, which run it
    // across a dozen reconfigurations.
    std::vector<std::string> argv = {RKV_KVSERVER,
                                     "--id=" + id,
                                     "--coordinator=" + address_,
                                     absl::StrCat("--token=", kClusterToken),
                                     "--fabric=soft",
                                     "--memory=32MiB",
                                     "--region_file=" + dir_ + "/" + id + ".region"};
    argv.insert(argv.end(), server_flags_.begin(), server_flags_.end());
    servers_[id] = std::make_unique<Process>(std::move(argv));
  }

  proto::ClusterMap Map(const std::string& token = kClusterToken) {
    CoordinatorStub stub(address_, token);
    proto::ClusterMap map;
    absl::Status s = stub.GetClusterMap(&map, absl::Seconds(2));
    EXPECT_TRUE(s.ok()) << s;
    return map;
  }

  // Waits until `pred(map)` holds; false after 10 s.
  template <typename Pred>
  bool WaitForMap(Pred pred) {
    // Generous: a server restarted on its region file settles its heap
    // before it registers, which under a sanitizer on a busy machine takes
    // seconds; and usage is counted every 5 s.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      CoordinatorStub stub(address_, kClusterToken);
      proto::ClusterMap map;
      if (stub.GetClusterMap(&map, absl::Seconds(1)).ok() && pred(map)) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  static int CountState(const proto::ClusterMap& m, proto::ServerState state) {
    int n = 0;
    for (const auto& s : m.servers()) n += s.state() == state;
    return n;
  }

  uint64_t Generation(const std::string& id) {
    const proto::ClusterMap map = Map();
    for (const auto& s : map.servers()) {
      if (s.id() == id) return s.region().generation();
    }
    return 0;
  }

  // Waits until the map has `id` up with a region other than generation
  // `old_generation`.
  bool WaitForNewRegion(const std::string& id, uint64_t old_generation) {
    return WaitForMap([&](const proto::ClusterMap& m) {
      for (const auto& s : m.servers()) {
        if (s.id() == id && s.state() == proto::SERVER_STATE_UP &&
            s.region().generation() != old_generation) {
          return true;
        }
      }
      return false;
    });
  }

  // kill -9, start again on its region file (or, with `lose_region`,
  // without it, as after a lost disk), and wait until the map has it up
  // with its new region.
  void RestartServer(const std::string& id, bool lose_region = false) {
    const uint64_t generation = Generation(id);
    servers_[id]->Kill(SIGKILL);
    if (lose_region) unlink((dir_ + "/" + id + ".region").c_str());
    StartServer(id);
    ASSERT_TRUE(WaitForNewRegion(id, generation)) << id << " did not come back";
  }

  // Servers s1..sN; returns when all are up and, replicated, the groups
  // they form serve.
  void StartServers(int n) {
    for (int i = 1; i <= n; ++i) StartServer(absl::StrCat("s", i));
    ASSERT_TRUE(WaitForMap([n](const proto::ClusterMap& m) {
      return CountState(m, proto::SERVER_STATE_UP) == n;
    })) << n
        << " servers did not come up";
    ASSERT_TRUE(WaitForGroups(n / Replicas())) << "the replica groups do not serve";
  }
  void StartThree() { StartServers(3); }

  // Waits until at least `groups` replica groups serve with all their
  // copies and none reconfigures; false after 10 s.
  bool WaitForGroups(int groups) {
    const int copies = Replicas();
    return WaitForMap([groups, copies](const proto::ClusterMap& m) {
      int full = 0;
      for (const auto& g : m.groups()) {
        if (g.state() == proto::GROUP_STATE_RECONFIGURING) return false;
        full += g.state() == proto::GROUP_STATE_SERVING && g.members_size() == copies;
      }
      return full >= groups;
    });
  }

  std::string dir_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<Process> coordinator_;
  std::map<std::string, std::unique_ptr<Process>> servers_;
  // More flags for every kvserver started from now on.
  std::vector<std::string> server_flags_;
};

}  // namespace rkv::testing

#endif  // RKV_TESTS_CLUSTER_CLUSTER_FIXTURE_H_
