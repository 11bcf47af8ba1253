#include "common/cluster_token.h"

#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, token, "",
          "Cluster token (shared secret). Empty with no --token_file: no authentication.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the cluster token (surrounding white space ignored); wins over --token.");

namespace rkv {

absl::StatusOr<std::string> ClusterTokenFromFlags(const std::string& default_file) {
  std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty() && absl::GetFlag(FLAGS_token).empty() && !default_file.empty() &&
      std::ifstream(default_file).good()) {
    path = default_file;
  }
  if (path.empty()) return absl::GetFlag(FLAGS_token);
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read token file ", path));
  std::stringstream s;
  s << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(s.str()));
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  if (token.size() > 56) {
    return absl::InvalidArgumentError(
        "the cluster token is at most 56 bytes (RDMA CM private data)");
  }
  return token;
}

}  // namespace rkv
