// Old spellings of command-line options: still accepted, not shown by --help. Every
// program takes its options in one vocabulary (README, "Options"); an option renamed
// into it keeps its old name as an alias, rewritten to the new one before parsing:
//
//   constexpr OptionAlias kAliases[] = {{"--eval-start", "--start-time"}};
//   po::command_line_parser parser(with_aliases(argc, argv, kAliases));
//
// Header-only, for the programs that link Boost.Program_options (not part of sim.h).
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace adagrouper {

struct OptionAlias {
  std::string_view old_name;  // "--eval-start", or a short option "-o"
  std::string_view name;      // "--start-time"
};

// `args` with each old spelling of an option replaced by its name: "--old" and
// "--old=VALUE" (and for a short alias "-o" alone) are rewritten; values and everything
// after "--" are left as they are.
inline std::vector<std::string> with_aliases(std::vector<std::string> args, std::span<const OptionAlias> aliases) {
  for (std::string& arg : args) {
    if (arg == "--") break;
    for (const OptionAlias& a : aliases) {
      const bool exact = arg == a.old_name;
      const bool with_value = a.old_name.starts_with("--") && arg.size() > a.old_name.size() &&
                              arg.starts_with(a.old_name) && arg[a.old_name.size()] == '=';
      if (exact || with_value) {
        arg = std::string(a.name) + arg.substr(a.old_name.size());
        break;
      }
    }
  }
  return args;
}

// The same for the arguments after argv[0].
inline std::vector<std::string> with_aliases(int argc, char** argv, std::span<const OptionAlias> aliases) {
  return with_aliases(std::vector<std::string>(argv + std::min(argc, 1), argv + argc), aliases);
}

}  // namespace adagrouper
