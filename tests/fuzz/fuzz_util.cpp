// The fuzz targets' temporary files and failure report (fuzz_util.h).
#include "fuzz_util.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <system_error>

#include <unistd.h>

namespace adagrouper::fuzz {

namespace {

// The temporary files of this process, by suffix; removed when it exits normally.
struct TempFiles {
  std::map<std::string, std::filesystem::path, std::less<>> paths;
  ~TempFiles() {
    std::error_code ec;
    for (const auto& [suffix, path] : paths) std::filesystem::remove(path, ec);
  }
  const std::filesystem::path& path_for(std::string_view suffix) {
    if (auto it = paths.find(suffix); it != paths.end()) return it->second;
    const char* dir = std::getenv("TMPDIR");
    std::string name = std::string(dir && *dir ? dir : "/tmp") + "/adagrouper-fuzz-XXXXXX" + std::string(suffix);
    const int fd = mkstemps(name.data(), static_cast<int>(suffix.size()));
    if (fd < 0) violated("cannot create a temporary file in $TMPDIR");
    close(fd);
    return paths.emplace(std::string(suffix), name).first->second;
  }
};

}  // namespace

std::filesystem::path write_temp(std::string_view bytes, std::string_view suffix) {
  static TempFiles files;
  const std::filesystem::path& path = files.path_for(suffix);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) violated("cannot write the temporary file");
  return path;
}

void violated(std::string_view what) {
  std::fprintf(stderr, "fuzz: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

}  // namespace adagrouper::fuzz
