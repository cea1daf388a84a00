// tools/scripts/plot.py through its checks (tests/plot/check.sh): bad columns and values exit 2
// with one line naming the file and column and write no figure; a good input writes PNG
// and SVG. Skipped, saying so, where Debian's python3-matplotlib is missing.
#include <gtest/gtest.h>

#include "../common/shell.h"

#include <string>

namespace {

using testshell::run;

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
