#include "bench/kvbench/verifier.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
  if (parts.size() != 4 || parts[1].size() != 16 ||
      !absl::SimpleHexAtoi(parts[1], &d.nonce) || !absl::SimpleAtoi(parts[2], &d.version)) {
    return absl::DataLossError("value is not one kvbench wrote");
  }
  d.key = std::string(parts[0]);
  const size_t header = value.size() - parts[3].size();
  std::string expected(value.substr(0, header));
  AppendFiller(std::string(value.substr(0, header)), value.size(), &expected);
  if (expected != value) return absl::DataLossError("value's filler is corrupt");
  return d;
}

Verifier::WriteTicket Verifier::StartWrite(int64_t keynum) {
  std::unique_lock<std::mutex> lock;
  KeyState& s = Lock(keynum, &lock);
  return {++s.issued, s.finished};
}

void Verifier::FinishWrite(int64_t keynum, const WriteTicket& ticket, bool acknowledged) {
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
  if (acknowledged) {
    s.floor = std::max(s.floor, ticket.finished);
    s.written = true;
  }
}

Verifier::ReadTicket Verifier::StartRead(int64_t keynum) {
  std::unique_lock<std::mutex> lock;
  const KeyState& s = Lock(keynum, &lock);
  return {s.floor, s.written};
}

absl::Status Verifier::Check(int64_t keynum, absl::string_view key, const ReadTicket& ticket,
                             const absl::StatusOr<std::string>& result) {
  if (!result.ok()) {
    if (!absl::IsNotFound(result.status())) return result.status();
    if (!ticket.written) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat(key, ": not found, but a write was acknowledged before the read"));
  }
  absl::StatusOr<DecodedValue> d = DecodeValue(*result);
  if (!d.ok()) return absl::DataLossError(absl::StrCat(key, ": ", d.status().message()));
  if (d->key != key) {
    return absl::DataLossError(absl::StrCat(key, ": holds the value of ", d->key));
  }
  if (d->nonce != nonce_) {
    if (!ticket.written) return absl::OkStatus();  // An earlier run's value, not yet overwritten.
    return absl::DataLossError(absl::StrCat(
        key, ": an earlier run's value, but a write was acknowledged before the read"));
  }
  std::unique_lock<std::mutex> lock;
  const uint64_t issued = Lock(keynum, &lock).issued;
  if (d->version <= ticket.floor || d->version > issued) {
    return absl::DataLossError(absl::StrCat(key, ": version ", d->version, ", expected one in (",
                                            ticket.floor, ", ", issued, "]"));
  }
  return absl::OkStatus();
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
