// An application of rkv's client library, built outside the rkv tree:
// puts a key into a cluster and reads it back.
//
//   consumer COORDINATOR TOKEN_FILE KEY VALUE
#include <fstream>
#include <iostream>
#include <sstream>

#include <rkv/client.h>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: consumer COORDINATOR TOKEN_FILE KEY VALUE\n";
    return 2;
  }
  std::ifstream token_file(argv[2]);
  std::stringstream token;
  token << token_file.rdbuf();
  rkv::ClientOptions options;
  options.cluster_token = token.str();
  options.fabric_kind = "soft";
  auto client = rkv::Client::OpenCluster(argv[1], options);
  if (!client.ok()) {
    std::cerr << "open: " << client.status() << "\n";
    return 1;
  }
  if (absl::Status s = (*client)->Put(argv[3], argv[4]); !s.ok()) {
    std::cerr << "put: " << s << "\n";
    return 1;
  }
  absl::StatusOr<std::string> v = (*client)->Get(argv[3]);
  if (!v.ok() || *v != argv[4]) {
    std::cerr << "get: " << (v.ok() ? "wrong value " + *v : v.status().ToString()) << "\n";
    return 1;
  }
  std::cout << argv[3] << " = " << *v << "\n";
  return 0;
}
