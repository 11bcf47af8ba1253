// Random operations through a client's asynchronous API, recorded for the
// checker: the workload of the deterministic linearizability tests.
#ifndef RKV_TESTS_LINEARIZABILITY_RANDOM_OPS_H_
#define RKV_TESTS_LINEARIZABILITY_RANDOM_OPS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "rkv/client.h"
#include "tests/linearizability/checker.h"

namespace rkv::linearizability {

struct OpMix {
  int keys = 3;
  // Weights of get, put, insert, delete.
  int weights[4] = {4, 3, 2, 1};
};

inline Outcome OutcomeOf(const absl::Status& s) {
  if (s.ok()) return Outcome::kOk;
  if (absl::IsNotFound(s)) return Outcome::kNotFound;
  if (absl::IsAlreadyExists(s)) return Outcome::kAlreadyExists;
  return Outcome::kUnknown;
}

// Issues one random operation of client `client_id` (its `seq`th) through
// `client` and records it in `rec`; `outstanding` counts it until it
// completes, and `failed` (unless null) if it fails. Values name their
// writer, so that every write is unique.
inline void IssueRandom(Client& client, int client_id, int seq, Rng& rng, const OpMix& mix,
                        HistoryRecorder& rec, int& outstanding, int* failed = nullptr) {
  const std::string key = absl::StrCat("key", rng.Uniform(mix.keys));
  const std::string value = absl::StrCat("c", client_id, "-", seq);
  int total = 0;
  for (int x : mix.weights) total += x;
  int pick = static_cast<int>(rng.Uniform(total));
  int kind = 0;
  while (pick >= mix.weights[kind]) pick -= mix.weights[kind++];
  outstanding++;
  auto respond = [&rec, &outstanding, failed](size_t id, const absl::Status& s,
                                               std::string value) {
    const Outcome outcome = OutcomeOf(s);
    rec.Respond(id, outcome, std::move(value));
    outstanding--;
    if (failed != nullptr && outcome == Outcome::kUnknown) ++*failed;
  };
  auto done = [respond](size_t id) {
    return [respond, id](absl::Status s) { respond(id, s, ""); };
  };
  switch (kind) {
    case 0: {
      const size_t id = rec.Invoke(OpKind::kGet, key, "", client_id);
      client.GetAsync(key, [respond, id](absl::StatusOr<std::string> v) {
        respond(id, v.status(), v.ok() ? *v : "");
      });
      break;
    }
    case 1:
      client.PutAsync(key, value, done(rec.Invoke(OpKind::kPut, key, value, client_id)));
      break;
    case 2:
      client.InsertAsync(key, value, done(rec.Invoke(OpKind::kInsert, key, value, client_id)));
      break;
    default:
      client.DeleteAsync(key, done(rec.Invoke(OpKind::kDelete, key, "", client_id)));
  }
}

}  // namespace rkv::linearizability

#endif  // RKV_TESTS_LINEARIZABILITY_RANDOM_OPS_H_
