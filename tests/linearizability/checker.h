// A linearizability checker for a map of registers (Wing & Gong's search
// with Lowe's memoization, as in Porcupine). Linearizability is local, so
// each key's history is checked on its own.
#ifndef RKV_TESTS_LINEARIZABILITY_CHECKER_H_
#define RKV_TESTS_LINEARIZABILITY_CHECKER_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace rkv::linearizability {

enum class OpKind { kGet, kPut, kInsert, kDelete };
enum class Outcome { kOk, kNotFound, kAlreadyExists, kUnknown };

struct Operation {
  OpKind kind = OpKind::kGet;
  std::string key;
  // Put/Insert: the value written. Get with kOk: the value returned.
  std::string value;
  Outcome outcome = Outcome::kOk;
  // Logical times; invoke < response. kUnknown operations (failed, perhaps
  // executed) may take effect at any time after invoke, or never.
  int64_t invoke = 0;
  int64_t response = 0;
  int client = 0;
};

struct CheckResult {
  bool linearizable = true;
  // Not linearizable because the search ran out of budget (many operations
  // of unknown outcome): inconclusive rather than wrong.
  bool gave_up = false;
  std::string key;          // The first key that fails.
  std::string explanation;  // Its history, for the failure message.
};

CheckResult Check(const std::vector<Operation>& history);

// The explanation of the shortest prefix of a failing `history` (by
// logical time), with operations still running at its end given unknown
// outcomes: the readable part of a failure.
std::string ShortestFailingPrefix(const std::vector<Operation>& history);

// Records a history from one thread or many (thread-safe), with a logical
// clock that orders every invocation and response.
class HistoryRecorder {
 public:
  // Returns an id to pass to Respond.
  size_t Invoke(OpKind kind, std::string key, std::string value, int client);
  void Respond(size_t id, Outcome outcome, std::string value = "");
  std::vector<Operation> history() const;

 private:
  mutable std::mutex mu_;
  std::vector<Operation> ops_;
  int64_t clock_ = 0;
};

}  // namespace rkv::linearizability

#endif  // RKV_TESTS_LINEARIZABILITY_CHECKER_H_
