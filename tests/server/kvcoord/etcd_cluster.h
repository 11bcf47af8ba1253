// An etcd cluster on loopback for tests: 1 or 3 (or any number of)
// members of /usr/bin/etcd as child processes, each with a data folder of
// its own under one fresh folder in /dev/shm (else ::testing::TempDir()), and a log
// (eN.log) beside it; the folder goes with the cluster unless a test
// failed.
//
//   absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start(3);
//   ASSERT_TRUE(cluster.ok()) << cluster.status();
//   ... (*cluster)->endpoints(), Kill(i), Restart(i), Stop(i), Cont(i) ...
//
// Every wait is for something a member says (its status, a read through
// it), bounded, never a sleep in the hope that it is enough.
//
// Ports: each member's client and peer ports are picked at random below
// the kernel's ephemeral range, where no outgoing connection takes one
// (a port freed by a killed member stays free for its restart), and are
// checked free by binding them; another process may still take one before
// etcd does, and a start that fails for it starts over on other ports.
//
// Members are children of the thread that starts (or restarts) them and
// die with it (PR_SET_PDEATHSIG): start them from the test's own thread.
#ifndef RKV_TESTS_SERVER_KVCOORD_ETCD_CLUSTER_H_
#define RKV_TESTS_SERVER_KVCOORD_ETCD_CLUSTER_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/kvcoord/etcd/etcd_client.h"

namespace rkv::testing {

class EtcdCluster {
 public:
  struct Options {
    int members = 3;
    std::string etcd = "/usr/bin/etcd";
    // Raft timing: a lost leader is replaced within about a second.
    int heartbeat_ms = 50;
    int election_ms = 500;
    // For Start, and for each Restart: until the members serve.
    absl::Duration ready_timeout = absl::Seconds(20);
    // Appended to every member's flags.
    std::vector<std::string> extra_flags;
  };

  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(int members) {
    Options options;
    options.members = members;
    return Start(std::move(options));
  }

  // Tries a few times over, on new ports each time: a port that another
  // process took between the check and etcd's bind fails that try only.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(Options options) {
    if (options.members < 1) return absl::InvalidArgumentError("EtcdCluster: no members");
    const absl::Time deadline = absl::Now() + options.ready_timeout;
    absl::Status last;
    for (int attempt = 0; attempt < 5 && absl::Now() < deadline; ++attempt) {
      std::unique_ptr<EtcdCluster> cluster(new EtcdCluster(options));
      last = cluster->StartOnce(deadline);
      if (last.ok()) return cluster;
    }
    return absl::Status(last.code(), absl::StrCat("EtcdCluster: no start: ", last.message()));
  }

  // Kills every member; removes the folder unless the test has failed
  // (the members' logs are there).
  ~EtcdCluster() {
    for (size_t i = 0; i < members_.size(); ++i) Kill(static_cast<int>(i));
    if (::testing::Test::HasFailure()) {
      std::cerr << "EtcdCluster: the members' logs are in " << dir_ << "\n";
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // host:port of every member's client URL, in member order.
  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (const Member& m : members_) out.push_back(Endpoint(m.client_port));
    return out;
  }
  std::string endpoint(int i) const { return Endpoint(members_[i].client_port); }
  // etcd's id of member i (what MemberStatus::member_id and leader_id say).
  uint64_t member_id(int i) const { return members_[i].id; }
  const std::string& dir() const { return dir_; }
  bool running(int i) const { return members_[i].pid > 0; }

  // SIGKILL, and waits until it has exited.
  void Kill(int i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    kill(m.pid, SIGKILL);
    waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }

  // Starts a killed member again on its data and ports, and waits until it
  // knows a leader and a read through it succeeds.
  absl::Status Restart(int i) {
    Kill(i);
    const absl::Time deadline = absl::Now() + options_.ready_timeout;
    if (absl::Status s = Spawn(i); !s.ok()) return s;
    return WaitServing({i}, deadline);
  }

  // SIGSTOP: the member hangs with its connections open, as a member whose
  // host stops answering would. Cont resumes it.
  void Stop(int i) {
    if (members_[i].pid > 0) kill(members_[i].pid, SIGSTOP);
  }
  void Cont(int i) {
    if (members_[i].pid > 0) kill(members_[i].pid, SIGCONT);
  }

  // The member the answering members with the highest term name as their
  // leader; -1 if none names one (or it is not one of ours).
  int LeaderIndex() {
    uint64_t term = 0;
    uint64_t leader = 0;
    const std::vector<server::etcd::MemberStatus> status = Status();
    LearnIds(status);
    for (const server::etcd::MemberStatus& s : status) {
      if (s.status.ok() && s.leader_id != 0 && s.raft_term >= term) {
        term = s.raft_term;
        leader = s.leader_id;
      }
    }
    for (size_t i = 0; i < members_.size(); ++i) {
      if (leader != 0 && members_[i].id == leader) return static_cast<int>(i);
    }
    return -1;
  }

  // Waits until some member is leader; its index, or -1 after `timeout`.
  int WaitForLeader(absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      const int leader = LeaderIndex();
      if (leader >= 0 && running(leader)) return leader;
      if (absl::Now() >= deadline) return -1;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  // Every member's status, in member order (a client of its own, so that
  // it is independent of the tests' clients).
  std::vector<server::etcd::MemberStatus> Status() { return status_client_->Status(); }

  // The last lines of member i's log, for a failure message.
  std::string LogTail(int i, int lines = 20) const {
    std::ifstream in(LogPath(i));
    std::vector<std::string> all;
    for (std::string line; std::getline(in, line);) all.push_back(line);
    const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
    return absl::StrJoin(all.begin() + from, all.end(), "\n");
  }

 private:
  struct Member {
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
    uint64_t id = 0;
  };

  explicit EtcdCluster(Options options) : options_(std::move(options)) {
    static std::atomic<int> clusters{0};
    // On tmpfs where there is one: members that share a disk with other
    // tests wait a second or more on fdatasync now and then, which the
    // coordinators' timing is not meant to ride out (a production etcd has
    // a disk of its own).
    std::string tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : ::testing::TempDir();
    if (!tmp.empty() && tmp.back() == '/') tmp.pop_back();
    dir_ = absl::StrCat(tmp, "/etcd-", getpid(), "-", ++clusters, "-", std::random_device()());
  }

  static std::string Endpoint(int port) { return absl::StrCat("127.0.0.1:", port); }
  std::string LogPath(int i) const { return absl::StrCat(dir_, "/e", i, ".log"); }

  // Whether nothing is bound to 127.0.0.1:port (or to any address on it).
  static bool PortFree(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    return free;
  }

  // Ports below the ephemeral range (ip_local_port_range), where the
  // kernel never hands one to an outgoing connection.
  static absl::StatusOr<std::vector<int>> PickPorts(int count) {
    int ephemeral_low = 32768;
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    range >> ephemeral_low;
    const int low = 10000;
    const int high = ephemeral_low;  // Exclusive.
    if (high - low < 1000) {
      return absl::FailedPreconditionError(
          absl::StrCat("EtcdCluster: the ephemeral port range starts at ", ephemeral_low,
                       ", leaving no room below it"));
    }
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(low, high - 1);
    std::set<int> chosen;
    for (int tries = 0; static_cast<int>(chosen.size()) < count && tries < 1000; ++tries) {
      const int port = pick(rng);
      if (!chosen.count(port) && PortFree(port)) chosen.insert(port);
    }
    if (static_cast<int>(chosen.size()) < count) {
      return absl::ResourceExhaustedError("EtcdCluster: no free ports");
    }
    std::vector<int> out(chosen.begin(), chosen.end());
    std::shuffle(out.begin(), out.end(), rng);
    return out;
  }

  absl::Status StartOnce(absl::Time deadline) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    if (!std::filesystem::create_directories(dir_, ec)) {
      return absl::InternalError(absl::StrCat("mkdir ", dir_, ": ", ec.message()));
    }
    absl::StatusOr<std::vector<int>> ports = PickPorts(2 * options_.members);
    if (!ports.ok()) return ports.status();
    members_.assign(options_.members, Member());
    std::vector<std::string> peers;
    for (int i = 0; i < options_.members; ++i) {
      members_[i].client_port = (*ports)[2 * i];
      members_[i].peer_port = (*ports)[2 * i + 1];
      peers.push_back(absl::StrCat("e", i, "=http://", Endpoint(members_[i].peer_port)));
    }
    initial_cluster_ = absl::StrJoin(peers, ",");
    server::etcd::EtcdOptions client_options;
    client_options.endpoints = endpoints();
    client_options.call_timeout = absl::Milliseconds(500);
    absl::StatusOr<std::unique_ptr<server::etcd::EtcdClient>> client =
        server::etcd::EtcdClient::Create(client_options);
    if (!client.ok()) return client.status();
    status_client_ = *std::move(client);

    for (int i = 0; i < options_.members; ++i) {
      if (absl::Status s = Spawn(i); !s.ok()) return s;
    }
    std::vector<int> all;
    for (int i = 0; i < options_.members; ++i) all.push_back(i);
    absl::Status s = WaitServing(all, deadline);
    if (!s.ok()) {
      for (int i = 0; i < options_.members; ++i) Kill(i);
      return s;
    }
    // Their ids, for LeaderIndex, from the cluster's own client (which may
    // still be reconnecting to a member that was not listening yet).
    for (;;) {
      LearnIds(Status());
      if (std::all_of(members_.begin(), members_.end(),
                      [](const Member& m) { return m.id != 0; })) {
        return absl::OkStatus();
      }
      if (absl::Now() >= deadline) return absl::DeadlineExceededError("etcd members' ids unknown");
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  void LearnIds(const std::vector<server::etcd::MemberStatus>& status) {
    for (size_t i = 0; i < status.size() && i < members_.size(); ++i) {
      if (status[i].status.ok() && status[i].member_id != 0) members_[i].id = status[i].member_id;
    }
  }

  absl::Status Spawn(int i) {
    Member& m = members_[i];
    const std::string name = absl::StrCat("e", i);
    // Everything the child needs, made before fork: after it, only
    // async-signal-safe calls (the test process has gRPC's threads).
    std::vector<std::string> argv = {
        options_.etcd,
        "--name=" + name,
        absl::StrCat("--data-dir=", dir_, "/", name, ".data"),
        "--listen-client-urls=http://" + Endpoint(m.client_port),
        "--advertise-client-urls=http://" + Endpoint(m.client_port),
        "--listen-peer-urls=http://" + Endpoint(m.peer_port),
        "--initial-advertise-peer-urls=http://" + Endpoint(m.peer_port),
        "--initial-cluster=" + initial_cluster_,
        "--initial-cluster-state=new",
        // Unique: a member of another test's cluster that took a port of
        // this one is refused as a peer instead of joining.
        "--initial-cluster-token=" + dir_,
        absl::StrCat("--heartbeat-interval=", options_.heartbeat_ms),
        absl::StrCat("--election-timeout=", options_.election_ms),
        "--pre-vote",
        // A member back from a kill, a stop or a partition asks before it
        // campaigns, instead of deposing a working leader with its term.
        "--pre-vote",
        "--logger=zap",
        "--log-outputs=" + LogPath(i),
    };
    argv.insert(argv.end(), options_.extra_flags.begin(), options_.extra_flags.end());
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const std::string out_path = absl::StrCat(dir_, "/", name, ".out");
    const pid_t parent = getpid();

    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);   // Never outlive the test.
      if (getppid() != parent) _exit(1);  // It died before prctl.
      const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (out >= 0) {
        dup2(out, STDOUT_FILENO);
        dup2(out, STDERR_FILENO);
      }
      execv(args[0], args.data());
      _exit(127);
    }
    m.pid = pid;
    return absl::OkStatus();
  }

  // Until every member of `which` knows a leader and serves a read; fails
  // early if one of them exits (a port taken by another process, say).
  absl::Status WaitServing(const std::vector<int>& which, absl::Time deadline) {
    std::vector<std::unique_ptr<server::etcd::EtcdClient>> clients;
    for (int i : which) {
      server::etcd::EtcdOptions o;
      o.endpoints = {endpoint(i)};
      o.call_timeout = absl::Milliseconds(500);
      o.total_timeout = absl::Milliseconds(500);
      absl::StatusOr<std::unique_ptr<server::etcd::EtcdClient>> c =
          server::etcd::EtcdClient::Create(o);
      if (!c.ok()) return c.status();
      clients.push_back(*std::move(c));
    }
    std::string last = "not asked";
    for (;;) {
      for (int i : which) {
        int status = 0;
        if (members_[i].pid > 0 && waitpid(members_[i].pid, &status, WNOHANG) == members_[i].pid) {
          members_[i].pid = -1;
          return absl::UnavailableError(
              absl::StrCat("etcd member ", i, " exited (status ", status, "):\n", LogTail(i)));
        }
      }
      bool serving = true;
      for (size_t k = 0; k < which.size() && serving; ++k) {
        const server::etcd::MemberStatus s = clients[k]->Status()[0];
        if (!s.status.ok() || s.leader_id == 0) {
          serving = false;
          last = s.status.ok() ? absl::StrCat("member ", which[k], " knows no leader")
                               : std::string(s.status.message());
          break;
        }
        absl::StatusOr<std::optional<server::etcd::KeyValue>> read =
            clients[k]->Get("etcd-cluster-ready");
        if (!read.ok()) {
          serving = false;
          last = std::string(read.status().message());
        }
      }
      if (serving) return absl::OkStatus();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("etcd members not serving in time (", last, ")"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  const Options options_;
  std::string dir_;
  std::string initial_cluster_;
  std::vector<Member> members_;
  std::unique_ptr<server::etcd::EtcdClient> status_client_;
};

}  // namespace rkv::testing

#endif  // RKV_TESTS_SERVER_KVCOORD_ETCD_CLUSTER_H_
