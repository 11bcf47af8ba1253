// Command-line parsing for every rkv program, on Abseil flags.
#ifndef RKV_COMMON_FLAGS_H_
#define RKV_COMMON_FLAGS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rkv {

// Parses argv with absl::ParseCommandLine after setting the usage text, and
// returns the positional arguments (argv[0] first). Flag names may be
// written with '-' or '_' (`--region-file` and `--region_file` are the same
// flag). Unknown flags and bad values print an error and exit(1); --help
// prints the usage and the program's flags.
std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view usage);

// Parses a byte size: "4096", "64KiB", "64MiB", "2GiB" (also KB/MB/GB as
// powers of 1024, and k/m/g). InvalidArgument otherwise.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

}  // namespace rkv

#endif  // RKV_COMMON_FLAGS_H_
