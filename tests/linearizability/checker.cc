#include "tests/linearizability/checker.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "absl/container/flat_hash_set.h"

namespace rkv::linearizability {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

using State = std::optional<std::string>;

// Applies `op` to `state` if the model allows the recorded outcome.
bool Apply(const Operation& op, State& state) {
  switch (op.kind) {
    case OpKind::kGet:
      if (op.outcome == Outcome::kUnknown) return true;
      if (op.outcome == Outcome::kNotFound) return !state.has_value();
      return state.has_value() && *state == op.value;
    case OpKind::kPut:
      state = op.value;
      return true;
    case OpKind::kInsert:
      if (state.has_value()) {
        return op.outcome == Outcome::kAlreadyExists || op.outcome == Outcome::kUnknown;
      }
      if (op.outcome == Outcome::kAlreadyExists) return false;
      state = op.value;
      return true;
    case OpKind::kDelete:
      if (!state.has_value()) {
        return op.outcome == Outcome::kNotFound || op.outcome == Outcome::kUnknown;
      }
      if (op.outcome == Outcome::kNotFound) return false;
      state.reset();
      return true;
  }
  return false;
}

class KeySearch {
 public:
  explicit KeySearch(std::vector<Operation> ops) : ops_(std::move(ops)) {
    for (Operation& op : ops_) {
      if (op.outcome == Outcome::kUnknown) op.response = kNever;
    }
    std::sort(ops_.begin(), ops_.end(),
              [](const Operation& a, const Operation& b) { return a.invoke < b.invoke; });
    done_.assign(ops_.size(), false);
  }

  // False when not linearizable, or when the search gave up (`gave_up`).
  bool Run() { return Search(State()); }
  bool gave_up() const { return gave_up_; }

 private:
  // Depth-first over "which pending operation takes effect next".
  bool Search(const State& state) {
    // Finished when every operation with a known outcome has taken effect;
    // those with unknown outcomes may never have.
    bool all_known_done = true;
    int64_t min_response = kNever;
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (done_[i]) continue;
      if (ops_[i].outcome != Outcome::kUnknown) all_known_done = false;
      min_response = std::min(min_response, ops_[i].response);
    }
    if (all_known_done) return true;
    if (!visited_.insert({done_, state}).second) return false;
    if (visited_.size() > kMaxStates) {
      gave_up_ = true;
      return false;
    }
    for (size_t i = 0; i < ops_.size(); ++i) {
      // Only an operation invoked before every pending one has responded
      // can be next.
      if (done_[i] || ops_[i].invoke > min_response) continue;
      State next = state;
      if (!Apply(ops_[i], next)) continue;
      done_[i] = true;
      if (Search(next)) return true;
      done_[i] = false;
    }
    return false;
  }

  std::vector<Operation> ops_;
  std::vector<bool> done_;
  // Configurations already explored and found to lead nowhere.
  absl::flat_hash_set<std::pair<std::vector<bool>, State>> visited_;
  bool gave_up_ = false;
  // Bounds the search's memory; histories in the tests need far fewer.
  static constexpr size_t kMaxStates = 2'000'000;
};

const char* KindName(OpKind k) {
  switch (k) {
    case OpKind::kGet:
      return "get";
    case OpKind::kPut:
      return "put";
    case OpKind::kInsert:
      return "insert";
    case OpKind::kDelete:
      return "delete";
  }
  return "?";
}

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kNotFound:
      return "not-found";
    case Outcome::kAlreadyExists:
      return "already-exists";
    case Outcome::kUnknown:
      return "unknown";
  }
  return "?";
}

std::string Describe(const std::vector<Operation>& ops) {
  std::ostringstream out;
  for (const Operation& op : ops) {
    out << "  [" << op.invoke << ", " << op.response << "] client " << op.client << " "
        << KindName(op.kind) << (op.kind == OpKind::kGet ? "" : " " + op.value) << " -> "
        << OutcomeName(op.outcome)
        << (op.kind == OpKind::kGet && op.outcome == Outcome::kOk ? " " + op.value : "") << "\n";
  }
  return out.str();
}

}  // namespace

CheckResult Check(const std::vector<Operation>& history) {
  std::map<std::string, std::vector<Operation>> by_key;
  for (const Operation& op : history) by_key[op.key].push_back(op);
  for (auto& [key, ops] : by_key) {
    KeySearch search(ops);
    if (!search.Run()) {
      std::sort(ops.begin(), ops.end(),
                [](const Operation& a, const Operation& b) { return a.invoke < b.invoke; });
      return {false, search.gave_up(), key,
              std::string(search.gave_up() ? "search gave up on" : "no linearization of") +
                  " key '" + key + "':\n" + Describe(ops)};
    }
  }
  return {};
}

size_t HistoryRecorder::Invoke(OpKind kind, std::string key, std::string value, int client) {
  std::lock_guard<std::mutex> lock(mu_);
  Operation op;
  op.kind = kind;
  op.key = std::move(key);
  op.value = std::move(value);
  op.client = client;
  op.invoke = ++clock_;
  op.response = kNever;
  op.outcome = Outcome::kUnknown;
  ops_.push_back(std::move(op));
  return ops_.size() - 1;
}

void HistoryRecorder::Respond(size_t id, Outcome outcome, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  Operation& op = ops_[id];
  op.response = ++clock_;
  op.outcome = outcome;
  if (op.kind == OpKind::kGet) op.value = std::move(value);
}

std::vector<Operation> HistoryRecorder::history() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}

std::string ShortestFailingPrefix(const std::vector<Operation>& history) {
  int64_t lo = 0, hi = 0;
  for (const Operation& op : history) hi = std::max(hi, op.response);
  auto prefix = [&](int64_t t) {
    std::vector<Operation> out;
    for (Operation op : history) {
      if (op.invoke > t) continue;
      if (op.response > t) op.outcome = Outcome::kUnknown;
      out.push_back(op);
    }
    return out;
  };
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (Check(prefix(mid)).linearizable) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return Check(prefix(lo)).explanation;
}

}  // namespace rkv::linearizability
