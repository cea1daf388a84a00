// The command line's outputs on the files in configs/, byte for byte: one test per case
// of tests/golden/cases.txt, each run by tests/golden/check.sh against the outputs
// recorded in tests/golden/expected/. A refactoring must leave every one unchanged.
#include <gtest/gtest.h>

#include "../common/shell.h"

#include <cctype>
#include <string>
#include <vector>

namespace {

using testshell::run;

const std::string kCheck = "'" SOURCE_ROOT "/tests/golden/check.sh' --build '" BUILD_ROOT "'";

std::vector<std::string> case_names() {
  std::string out;
  std::vector<std::string> names;
  if (run(kCheck + " --list", out) != 0) return names;
  std::size_t at = 0;
  while (at < out.size()) {
    const std::size_t nl = out.find('\n', at);
    const std::string line = out.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!line.empty()) names.push_back(line);
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return names;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, OutputsAreByteIdentical) {
  std::string out;
  const int rc = run(kCheck + " '" + GetParam() + "'", out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("golden: 1 matched, 0 differ"), std::string::npos) << out;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Configs, Golden, ::testing::ValuesIn(case_names()), test_name);

TEST(GoldenCases, AreListed) { EXPECT_GE(case_names().size(), 40u); }

}  // namespace
