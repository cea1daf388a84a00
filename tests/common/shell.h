// Running a shell command from a test: its exit status and its output (stdout and stderr).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace testshell {

// Runs `cmd` with /bin/sh, appends its stdout and stderr to `out`, and returns its exit
// status (-1 if it could not start or was killed by a signal).
inline int run(const std::string& cmd, std::string& out) {
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace testshell
