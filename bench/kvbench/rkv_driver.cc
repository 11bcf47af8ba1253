// kvbench on rkv: the cluster client's asynchronous API, one client per
// worker thread, --outstanding operations in flight sharing doorbells.
#include "bench/kvbench/driver.h"
#include "client/cluster/cluster_client.h"

namespace rkv::bench {
namespace {

class RkvDriver final : public Driver {
 public:
  explicit RkvDriver(std::unique_ptr<Client> client) : client_(std::move(client)) {}

  void Read(const std::string& key, ReadCallback done) override {
    client_->GetAsync(key, std::move(done));
  }
  void Write(const std::string& key, const std::string& value, WriteCallback done) override {
    client_->PutAsync(key, value, std::move(done));
  }
  void Insert(const std::string& key, const std::string& value, WriteCallback done) override {
    client_->InsertAsync(key, value, std::move(done));
  }
  void Delete(const std::string& key, WriteCallback done) override {
    client_->DeleteAsync(key, std::move(done));
  }
  void Poll(absl::Duration timeout) override { client_->Poll(timeout); }
  size_t in_flight() const override { return client_->in_flight(); }

  std::optional<std::array<OpCosts, kOpTypes>> costs() const override {
    std::array<OpCosts, kOpTypes> c;
    for (int i = 0; i < kOpTypes; ++i) c[i] = client_->costs(static_cast<OpType>(i));
    return c;
  }
  std::optional<std::array<OpStats, kOpTypes>> stats() const override {
    std::array<OpStats, kOpTypes> s;
    for (int i = 0; i < kOpTypes; ++i) s[i] = client_->stats(static_cast<OpType>(i));
    return s;
  }

 private:
  std::unique_ptr<Client> client_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Driver>> OpenRkvDriver(const DriverConfig& config) {
  client_internal::OpenOptions options = config.rkv;
  options.max_outstanding = static_cast<uint32_t>(config.outstanding);
  absl::StatusOr<std::unique_ptr<Client>> client =
      client_internal::OpenCluster(config.address, options);
  if (!client.ok()) return client.status();
  return std::make_unique<RkvDriver>(*std::move(client));
}

}  // namespace rkv::bench
