// The synchronous calls of rkv::Client: the asynchronous operations, driven
// by Poll() until nothing is in flight.
#include "rkv/client.h"

namespace rkv {
namespace {

absl::Status NeverCompleted() { return absl::InternalError("the operation never completed"); }

}  // namespace

void Client::Drain() {
  while (in_flight() > 0) Poll(absl::Seconds(1));
}

// Each result starts as an error, so that an operation that never completed
// (a bug) cannot pass for a success.
absl::StatusOr<std::string> Client::Get(absl::string_view key) {
  absl::StatusOr<std::string> out = NeverCompleted();
  GetAsync(key, [&](absl::StatusOr<std::string> v) { out = std::move(v); });
  Drain();
  return out;
}

absl::Status Client::Put(absl::string_view key, absl::string_view value) {
  absl::Status out = NeverCompleted();
  PutAsync(key, value, [&](absl::Status s) { out = std::move(s); });
  Drain();
  return out;
}

absl::Status Client::Insert(absl::string_view key, absl::string_view value) {
  absl::Status out = NeverCompleted();
  InsertAsync(key, value, [&](absl::Status s) { out = std::move(s); });
  Drain();
  return out;
}

absl::Status Client::Delete(absl::string_view key) {
  absl::Status out = NeverCompleted();
  DeleteAsync(key, [&](absl::Status s) { out = std::move(s); });
  Drain();
  return out;
}

}  // namespace rkv
