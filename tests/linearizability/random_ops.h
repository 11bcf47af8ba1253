// Random operations through a client's asynchronous API, recorded for the
// checker: the workload of the deterministic linearizability tests.
#ifndef RKV_TESTS_LINEARIZABILITY_RANDOM_OPS_H_
#define RKV_TESTS_LINEARIZABILITY_RANDOM_OPS_H_

#include <functional>
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
  // Values are padded to this length.
  size_t value_bytes = 0;
};

inline Outcome OutcomeOf(const absl::Status& s) {
  if (s.ok()) return Outcome::kOk;
  if (absl::IsNotFound(s)) return Outcome::kNotFound;
  if (absl::IsAlreadyExists(s)) return Outcome::kAlreadyExists;
  return Outcome::kUnknown;
}

// Issues one random operation of client `client_id` (its `seq`th) through
// `client` and records it in `rec`; `outstanding` counts it until it
// completes, and `on_failure` (if any) hears how it failed, if it does.
// Values name their writer, so that every write is unique.
inline void IssueRandom(Client& client, int client_id, int seq, Rng& rng, const OpMix& mix,
                        HistoryRecorder& rec, int& outstanding,
                        std::function<void(const absl::Status&)> on_failure = nullptr) {
  const std::string key = absl::StrCat("key", rng.Uniform(mix.keys));
  std::string value = absl::StrCat("c", client_id, "-", seq);
  if (value.size() < mix.value_bytes) value.resize(mix.value_bytes, '.');
  int total = 0;
  for (int x : mix.weights) total += x;
  int pick = static_cast<int>(rng.Uniform(total));
  int kind = 0;
  while (pick >= mix.weights[kind]) pick -= mix.weights[kind++];
  outstanding++;
  auto respond = [&rec, &outstanding, on_failure = std::move(on_failure)](
                     size_t id, const absl::Status& s, std::string value) {
    const Outcome outcome = OutcomeOf(s);
    rec.Respond(id, outcome, std::move(value));
    outstanding--;
    if (on_failure && outcome == Outcome::kUnknown) on_failure(s);
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
