// An application of rkv's client library, built outside the rkv tree
// against an installed rkv (tests/install/run.sh): it uses every
// declaration of the public header, so that each one compiles and links.
//
//   consumer COORDINATOR TOKEN_FILE KEY VALUE
#include <rkv/client.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {

// Fails the program with what went wrong.
int Fail(const std::string& what, const absl::Status& s) {
  std::cerr << what << ": " << s << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: consumer COORDINATOR TOKEN_FILE KEY VALUE\n";
    return 2;
  }
  std::ifstream token_file(argv[2]);
  std::stringstream token;
  token << token_file.rdbuf();
  const std::string key = argv[3], value = argv[4];

  rkv::ClientOptions options;
  options.fabric_kind = "soft";
  options.rdma_device = "";
  options.cluster_token = token.str();
  options.max_outstanding = 16;
  options.cache_entries = 1024;
  options.grace_period = absl::Milliseconds(200);
  options.heap_chunk_bytes = 64 << 10;
  options.scratch_bytes = 4 << 20;
  options.seed = 7;
  absl::StatusOr<std::unique_ptr<rkv::Client>> opened = rkv::Client::OpenCluster(argv[1], options);
  if (!opened.ok()) return Fail("open", opened.status());
  rkv::Client& client = **opened;

  // The synchronous calls.
  if (absl::Status s = client.Put(key, value); !s.ok()) return Fail("put", s);
  absl::StatusOr<std::string> v = client.Get(key);
  if (!v.ok()) return Fail("get", v.status());
  if (*v != value) return Fail("get", absl::DataLossError("read back " + *v));
  const std::string scratch_key = key + ".scratch";
  if (absl::Status s = client.Insert(scratch_key, "1"); !s.ok()) return Fail("insert", s);
  if (absl::Status s = client.Insert(scratch_key, "2"); !absl::IsAlreadyExists(s)) {
    return Fail("insert of a present key", s);
  }
  if (absl::Status s = client.Delete(scratch_key); !s.ok()) return Fail("delete", s);
  if (absl::Status s = client.Delete(scratch_key); !absl::IsNotFound(s)) {
    return Fail("delete of an absent key", s);
  }

  // The asynchronous calls, all in flight at once, driven by Poll().
  absl::Status put = absl::UnknownError("never ran"), insert = put, del = put;
  absl::StatusOr<std::string> got = absl::UnknownError("never ran");
  const std::string async_key = key + ".async";
  const rkv::Client::DoneCallback on_put = [&put](absl::Status s) { put = s; };
  const rkv::Client::GetCallback on_get = [&got](absl::StatusOr<std::string> r) {
    got = std::move(r);
  };
  client.PutAsync(async_key, "a", on_put);
  client.GetAsync(key, on_get);
  client.InsertAsync(async_key + "2", "b", [&insert](absl::Status s) { insert = s; });
  client.DeleteAsync(async_key + "3", [&del](absl::Status s) { del = s; });
  size_t finished = 0;
  for (int i = 0; i < 10000 && client.in_flight() > 0; ++i) {
    finished += client.Poll(absl::Milliseconds(10));
  }
  if (client.in_flight() != 0 || finished != 4) {
    return Fail("poll", absl::DeadlineExceededError("asynchronous operations did not finish"));
  }
  if (!put.ok()) return Fail("put (async)", put);
  if (!got.ok() || *got != value) return Fail("get (async)", got.status());
  if (!insert.ok()) return Fail("insert (async)", insert);
  if (!absl::IsNotFound(del)) return Fail("delete (async) of an absent key", del);

  // What the operations cost.
  uint64_t ops = 0, retries = 0;
  for (int t = 0; t < rkv::kOpTypes; ++t) {
    const rkv::OpCosts c = client.costs(static_cast<rkv::OpType>(t));
    if (c.ops > 0 && (c.round_trips == 0 || c.requests == 0 || c.bytes == 0)) {
      return Fail("costs", absl::InternalError("operations that cost nothing"));
    }
    ops += c.ops;
    retries += c.retries;
  }
  if (ops < 10 || client.costs(rkv::OpType::kGet).ops < 2 ||
      client.costs(rkv::OpType::kPut).ops < 2 || client.costs(rkv::OpType::kInsert).ops < 3 ||
      client.costs(rkv::OpType::kDelete).ops < 3) {
    return Fail("costs", absl::InternalError("operations not counted"));
  }
  // How they ended, and how long they took.
  const rkv::OpStats del_stats = client.stats(rkv::OpType::kDelete);
  uint64_t timed = 0;
  for (int i = 0; i < rkv::kLatencyBuckets; ++i) timed += del_stats.latency_buckets[i];
  if (del_stats.outcomes[static_cast<int>(rkv::OpOutcome::kNotFound)] < 1 ||
      timed < del_stats.outcomes[static_cast<int>(rkv::OpOutcome::kNotFound)] ||
      rkv::LatencyBucketBound(rkv::kLatencyBuckets - 1) != absl::InfiniteDuration() ||
      del_stats.latency_sum <= absl::ZeroDuration()) {
    return Fail("stats", absl::InternalError("outcomes or latencies not counted"));
  }
  std::cout << key << " = " << value << " (" << ops << " operations, " << retries << " retries)\n";
  return 0;
}
