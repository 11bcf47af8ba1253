#include "bench/kvbench/verifier.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/protocol/outcome.h"
#include "common/hash.h"
#include "common/logging.h"

namespace rkv::bench {
namespace {

void AppendFiller(const std::string& header, size_t size, std::string* out) {
  uint64_t x = Fnv1a64(header);
  while (out->size() < size) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out->push_back(static_cast<char>('a' + (x >> 59) % 26));
  }
}

}  // namespace

std::string EncodeValue(absl::string_view key, uint64_t nonce, uint64_t version, size_t size) {
  std::string v = absl::StrCat(key, "|", absl::Hex(nonce, absl::kZeroPad16), "|", version, "|");
  const std::string header = v;
  AppendFiller(header, size, &v);
  return v;
}

absl::StatusOr<DecodedValue> DecodeValue(absl::string_view value) {
  std::vector<absl::string_view> parts = absl::StrSplit(value, absl::MaxSplits('|', 3));
  DecodedValue d;
  if (parts.size() != 4 || parts[1].size() != 16 || !absl::SimpleHexAtoi(parts[1], &d.nonce) ||
      !absl::SimpleAtoi(parts[2], &d.version)) {
    return absl::DataLossError("value is not one kvbench wrote");
  }
  d.key = std::string(parts[0]);
  const size_t header = value.size() - parts[3].size();
  std::string expected(value.substr(0, header));
  AppendFiller(std::string(value.substr(0, header)), value.size(), &expected);
  if (expected != value) return absl::DataLossError("value's filler is corrupt");
  return d;
}

Verifier::WriteTicket Verifier::StartWrite(int64_t keynum, Change change) {
  std::unique_lock<std::mutex> lock;
  KeyState& s = Lock(keynum, &lock);
  const WriteTicket t{++s.issued, s.finished, change, {s.floor, s.acked}};
  s.possible.push_back({t.version, change == Change::kDelete});
  return t;
}

void Verifier::FinishWrite(int64_t keynum, const WriteTicket& ticket, bool acknowledged) {
  absl::Status result = acknowledged
                            ? absl::OkStatus()
                            : client_internal::WithUnknownOutcome(absl::UnavailableError("failed"));
  (void)FinishWrite(keynum, "", ticket, result);
}

absl::Status Verifier::FinishWrite(int64_t keynum, absl::string_view key, const WriteTicket& ticket,
                                   const absl::Status& result) {
  std::unique_lock<std::mutex> lock;
  KeyState& s = Lock(keynum, &lock);
  s.finished_above.push_back(ticket.version);
  for (bool advanced = true; advanced;) {
    advanced = false;
    for (size_t i = 0; i < s.finished_above.size(); ++i) {
      if (s.finished_above[i] == s.finished + 1) {
        ++s.finished;
        s.finished_above[i] = s.finished_above.back();
        s.finished_above.pop_back();
        advanced = true;
        break;
      }
    }
  }

  const bool insert = ticket.change == Change::kInsert;
  const bool del = ticket.change == Change::kDelete;
  const bool answered_no =
      (insert && absl::IsAlreadyExists(result)) || (del && absl::IsNotFound(result));
  absl::Status verdict;
  if ((insert || del) && (result.ok() || answered_no)) {
    const bool found_absent = insert ? result.ok() : answered_no;
    if (!May(s, ticket.before, found_absent, ticket.version)) {
      verdict = absl::DataLossError(absl::StrCat(
          key, ": ", insert ? "insert" : "delete", " answered ",
          result.ok() ? "OK" : absl::StatusCodeToString(result.code()), ", but the key was surely ",
          found_absent ? "present" : "absent", " throughout", Forgotten(s)));
    }
  }
  if (!result.ok()) {
    // It changed nothing, or lingers; either way it is no longer in flight.
    for (size_t i = 0; i < s.possible.size(); ++i) {
      if (s.possible[i].version == ticket.version) {
        s.possible.erase(s.possible.begin() + static_cast<ptrdiff_t>(i));
        break;
      }
    }
    if (!answered_no && client_internal::OutcomeUnknown(result)) {
      if (del) {
        s.lingering_absent = std::max(s.lingering_absent, ticket.version);
      } else {
        s.lingering.insert(std::upper_bound(s.lingering.begin(), s.lingering.end(), ticket.version),
                           ticket.version);
        if (s.lingering.size() > kMaxLingering) {
          s.lingering.erase(s.lingering.begin());
          ++s.forgotten;
        }
      }
    }
  }
  if (result.ok()) {
    s.acked = true;
    if (ticket.finished > s.floor) {
      s.floor = ticket.finished;
      // Versions the floor passed cannot be read by operations that start
      // from now on; those already under way remember them by the newest.
      std::erase_if(s.possible, [&s](const Version& v) {
        if (v.version > s.floor) return false;
        uint64_t& passed = v.absent ? s.passed_absent : s.passed_value;
        passed = std::max(passed, v.version);
        return true;
      });
    }
  }
  return verdict;
}

Verifier::ReadTicket Verifier::StartRead(int64_t keynum) {
  std::unique_lock<std::mutex> lock;
  const KeyState& s = Lock(keynum, &lock);
  return {s.floor, s.acked};
}

absl::Status Verifier::Check(int64_t keynum, absl::string_view key, const ReadTicket& ticket,
                             const absl::StatusOr<std::string>& result) {
  if (!result.ok()) {
    if (!absl::IsNotFound(result.status())) return result.status();
    std::unique_lock<std::mutex> lock;
    const KeyState& s = Lock(keynum, &lock);
    if (May(s, ticket, /*absent=*/true, 0)) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat(
        key, ": not found, but a write was acknowledged before the read and no delete since"));
  }
  absl::StatusOr<DecodedValue> d = DecodeValue(*result);
  if (!d.ok()) return absl::DataLossError(absl::StrCat(key, ": ", d.status().message()));
  if (d->key != key) {
    return absl::DataLossError(absl::StrCat(key, ": holds the value of ", d->key));
  }
  if (d->nonce != nonce_) {
    if (!ticket.acked) return absl::OkStatus();  // An earlier run's value, not yet overwritten.
    return absl::DataLossError(absl::StrCat(
        key, ": an earlier run's value, but a change was acknowledged before the read"));
  }
  std::unique_lock<std::mutex> lock;
  const KeyState& s = Lock(keynum, &lock);
  // A change of unknown outcome may take effect at any time.
  if (std::binary_search(s.lingering.begin(), s.lingering.end(), d->version)) {
    return absl::OkStatus();
  }
  if (d->version <= ticket.floor || d->version > s.issued) {
    return absl::DataLossError(absl::StrCat(key, ": version ", d->version, ", expected one in (",
                                            ticket.floor, ", ", s.issued, "]", Forgotten(s)));
  }
  // Above the floor every version that may be read is still listed; one
  // that is not changed nothing.
  if (d->version > s.floor) {
    bool written = false;
    for (const Version& v : s.possible) written |= v.version == d->version && !v.absent;
    if (!written) {
      return absl::DataLossError(absl::StrCat(
          key, ": version ", d->version,
          " was never written (a delete's, an insert answered AlreadyExists, or a change that "
          "failed before it could take effect)",
          Forgotten(s)));
    }
  }
  return absl::OkStatus();
}

bool Verifier::May(const KeyState& s, const ReadTicket& ticket, bool absent, uint64_t own) {
  if (!ticket.acked) return true;  // The key may still hold what it held before the run.
  // A change of unknown outcome may take effect at any time.
  if (absent ? s.lingering_absent != 0 && s.lingering_absent != own : !s.lingering.empty()) {
    return true;
  }
  if ((absent ? s.passed_absent : s.passed_value) > ticket.floor) return true;
  for (const Version& v : s.possible) {
    if (v.absent == absent && v.version != own && v.version > ticket.floor) return true;
  }
  return false;
}

std::string Verifier::Forgotten(const KeyState& s) {
  if (s.forgotten == 0) return "";
  return absl::StrCat(" (", s.forgotten, " older values of unknown outcome forgotten)");
}

Verifier::KeyState& Verifier::Lock(int64_t keynum, std::unique_lock<std::mutex>* lock) {
  const auto k = static_cast<uint64_t>(keynum);
  const uint64_t chunk = k >> kChunkBits;
  RKV_CHECK(chunk < kChunks) << "key number " << keynum << " beyond what --verify tracks";
  KeyState* states = chunks_[chunk].load(std::memory_order_acquire);
  if (states == nullptr) {
    auto fresh = std::make_unique<KeyState[]>(size_t{1} << kChunkBits);
    if (chunks_[chunk].compare_exchange_strong(states, fresh.get(), std::memory_order_acq_rel)) {
      states = fresh.get();
      owned_[chunk] = std::move(fresh);
    }
  }
  *lock = std::unique_lock<std::mutex>(stripes_[k % kStripes]);
  return states[k & ((1 << kChunkBits) - 1)];
}

}  // namespace rkv::bench
