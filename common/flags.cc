#include "common/flags.h"

#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rkv {
namespace {

// "--region-file=x" -> "--region_file=x"; values and positional arguments
// are left alone, and so is everything after a bare "--".
std::string NormalizeFlag(absl::string_view arg) {
  std::string out(arg);
  size_t name_end = out.find('=');
  if (name_end == std::string::npos) name_end = out.size();
  for (size_t i = 2; i < name_end; ++i) {
    if (out[i] == '-') out[i] = '_';
  }
  return out;
}

bool OnlyOurFlags(absl::string_view file) {
  // Show the program's own flags in --help, not Abseil's internals.
  return !absl::StrContains(file, "/absl/");
}

}  // namespace

std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view usage) {
  absl::SetProgramUsageMessage(absl::string_view(usage.data(), usage.size()));
  absl::FlagsUsageConfig config;
  config.contains_help_flags = OnlyOurFlags;
  config.contains_helpshort_flags = OnlyOurFlags;
  absl::SetFlagsUsageConfig(config);

  // Normalized copies live for the program's lifetime: absl keeps pointers.
  static std::vector<std::string>* storage = new std::vector<std::string>();
  std::vector<char*> args;
  bool after_dashdash = false;
  for (int i = 0; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (i > 0 && !after_dashdash && a.size() > 2 && a.substr(0, 2) == "--") {
      storage->push_back(NormalizeFlag(a));
    } else {
      if (a == "--") after_dashdash = true;
      storage->emplace_back(a);
    }
  }
  for (std::string& s : *storage) args.push_back(s.data());
  return absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[digits]))) {
    digits++;
  }
  uint64_t n = 0;
  if (digits == 0 || !absl::SimpleAtoi(text.substr(0, digits), &n)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a size like 64MiB"));
  }
  const std::string unit = absl::AsciiStrToLower(text.substr(digits));
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    shift = 30;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': unknown unit '", unit, "'"));
  }
  if (n > (UINT64_MAX >> shift))
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too large"));
  return n << shift;
}

}  // namespace rkv
