// tools/scripts/plot.py through its checks (tests/plot/check.sh): bad columns and values exit 2
// with one line naming the file and column and write no figure; a good input writes PNG
// and SVG. Skipped, saying so, where Debian's python3-matplotlib is missing.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include <sys/wait.h>

namespace {

int run(const std::string& cmd, std::string& out) {
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Plot, BadInputIsRejectedAndGoodInputMakesFigures) {
  std::string probe;
  if (run("/usr/bin/python3 -c 'import matplotlib'", probe) != 0)
    GTEST_SKIP() << "no /usr/bin/python3 with matplotlib (Debian: python3-matplotlib): " << probe;
  std::string out;
  const int rc = run("'" SOURCE_ROOT "/tests/plot/check.sh'", out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("plot checks passed"), std::string::npos) << out;
}

}  // namespace
