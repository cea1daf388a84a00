// meson install into a temporary DESTDIR (tests/install/check.sh): the programs, the
// libraries and headers, adagrouper.pc, the Python module, completion, man pages and the
// example data are where they belong, and a C++ program built with `pkg-config --cflags
// --libs adagrouper`, the installed programs and the installed module all run.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <utility>

#include "../common/shell.h"

namespace {

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

TEST(Install, FilesAreInPlaceAndAProgramBuildsWithPkgConfig) {
  std::string cmd = "env";
  const std::array<std::pair<const char*, const char*>, 13> vars{{
      {"BUILD_ROOT", BUILD_ROOT}, {"PREFIX", PREFIX}, {"BINDIR", BINDIR}, {"LIBDIR", LIBDIR},
      {"INCLUDEDIR", INCLUDEDIR}, {"DATADIR", DATADIR}, {"MANDIR", MANDIR}, {"CXX", CXX}, {"SANITIZE", SANITIZE},
      {"CALIB_BUILT", CALIB_BUILT}, {"MAN_BUILT", MAN_BUILT}, {"PYTHON", PYTHON}, {"PYTHON_DIR", PYTHON_DIR},
  }};
  for (const auto& [name, value] : vars) cmd += " " + std::string(name) + "=" + quoted(value);
  cmd += " " + quoted(SOURCE_ROOT "/tests/install/check.sh");
  std::string out;
  const int rc = testshell::run(cmd, out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("install checks passed"), std::string::npos) << out;
}

}  // namespace
