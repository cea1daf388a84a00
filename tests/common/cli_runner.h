// Running build/adagrouper from the end-to-end tests: one runner for every suite.
// The including test target defines ADAGROUPER_BIN and SOURCE_ROOT (see its meson.build).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace clirunner {

struct Outcome {
  int rc;            // exit status (-1 if killed by a signal)
  std::string out;   // stdout
  std::string err;   // stderr
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `PROGRAM ARGS` from the source root; stderr goes through a file in `dir`.
inline Outcome run_program(const std::string& program, const std::string& args, const std::filesystem::path& dir) {
  const std::filesystem::path err = dir / "stderr.txt";
  const std::string cmd = std::string("cd '") + SOURCE_ROOT + "' && '" + program + "' " + args + " 2>'" +
                          err.string() + "'";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, slurp(err)};
}

// Runs `adagrouper ARGS` from the source root; stderr goes through a file in `dir`.
inline Outcome run_adagrouper(const std::string& args, const std::filesystem::path& dir) {
  return run_program(ADAGROUPER_BIN, args, dir);
}

}  // namespace clirunner
