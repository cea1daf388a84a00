// Reading a custom schedule file: adagrouper's JSON, or PyTorch's CSV by its look.
#include "schedule_file.h"

#include <cctype>
#include <charconv>
#include <fstream>

#include <fmt/format.h>

#include "error.h"
#include "json_util.h"
#include "schedule_csv.h"

namespace adagrouper::sim {

namespace {

Op parse_op(const Field& f) {
  if (f.json().is_string()) {
    const std::string s = f.string();
    if (s.size() >= 2 && (s[0] == 'F' || s[0] == 'B')) {
      int m = -1;
      auto [p, ec] = std::from_chars(s.data() + 1, s.data() + s.size(), m);
      if (ec == std::errc() && p == s.data() + s.size() && m >= 0)
        return {s[0] == 'F' ? Phase::Forward : Phase::Backward, m};
    }
    f.fail(fmt::format("op '{}' is not of the form F<m> or B<m>", s));
  }
  f.require_object();
  f.check_keys({"op", "micro_batch"}, "an op");
  const std::string kind = f.at("op").string();
  if (kind != "forward" && kind != "backward") f.at("op").fail("must be \"forward\" or \"backward\"");
  const int m = f.at("micro_batch").int_in(0);
  return {kind == "forward" ? Phase::Forward : Phase::Backward, m};
}

// PyTorch's CSV: a ".csv" name, or a first non-blank character that starts a CSV row.
bool is_torch_csv(const std::filesystem::path& path) {
  if (path.extension() == ".csv") return true;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return false;  // read_json_file says so
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  return in && (std::isdigit(static_cast<unsigned char>(c)) || c == '(' || c == ',');
}

}  // namespace

Schedule load_schedule_file(const std::filesystem::path& path, int S, int M) {
  if (is_torch_csv(path)) return load_torch_csv(path, S, M);
  const auto doc = read_json_file(path);
  Field root(doc, path.string());
  root.require_object();
  root.check_keys({"stages"}, "a schedule file");
  Schedule sch;
  sch.spec = ScheduleSpec::custom();
  sch.k = 0;
  Field stages = root.at("stages");
  for (std::size_t s = 0; s < stages.size(); ++s) {
    Field ops = stages.at(s);
    std::vector<Op> order;
    order.reserve(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) order.push_back(parse_op(ops.at(i)));
    sch.stages.push_back(std::move(order));
  }
  validate_schedule(sch, S, M, path.string());
  return sch;
}

}  // namespace adagrouper::sim
