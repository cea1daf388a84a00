#include "io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

namespace adagrouper {

void write_file_atomic(const std::filesystem::path& path, std::string_view content) {
  const std::string target = path.string();
  const std::string tmp = fmt::format("{}.tmp.{}", target, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(fmt::format("{}: cannot write: {}", target, std::strerror(errno)));
  const bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: cannot write: {}", target, std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: cannot write: {}", target, std::strerror(err)));
  }
}

}  // namespace adagrouper
