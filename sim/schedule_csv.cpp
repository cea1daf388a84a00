// PyTorch's compute-only schedule CSV: the reader with its checks, the writer, and the
// step-by-stage grid (schedule_csv.h).
#include "schedule_csv.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "error.h"
#include "json_util.h"

namespace adagrouper::sim {

namespace {

// A cell of the file, 1-based.
struct Where {
  int row, cell;
};

// An op as the file lists it.
struct Listed {
  Op op;
  Where where;
};
using Rows = std::vector<std::vector<Listed>>;

[[noreturn]] void fail_at(const std::string& source, Where w, const std::string& what) {
  throw InputError(fmt::format("{}: row {}, cell {}: {}", source, w.row, w.cell, what));
}

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// The lines of `text` without their line ends; blank lines at the end are dropped.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const auto end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  return lines;
}

// The cells of one line, trimmed, without the double quotes a CSV writer may add.
std::vector<std::string_view> cells_of(std::string_view line) {
  std::vector<std::string_view> cells;
  for (;;) {
    const auto end = line.find(',');
    std::string_view cell = trim(line.substr(0, end));
    if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = trim(cell.substr(1, cell.size() - 2));
    cells.push_back(cell);
    if (end == std::string_view::npos) return cells;
    line.remove_prefix(end + 1);
  }
}

// A non-negative number spanning all of `s`.
std::optional<int> number(std::string_view s) {
  int n = -1;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || n < 0) return std::nullopt;
  return n;
}

// "2F0": model stage, phase letter, micro-batch.
std::optional<Op> parse_action(std::string_view s) {
  const auto letter = s.find_first_not_of("0123456789");
  if (letter == std::string_view::npos || letter == 0) return std::nullopt;
  const auto phase = phase_of_letter(s[letter]);
  const auto j = number(s.substr(0, letter)), m = number(s.substr(letter + 1));
  if (!phase || !j || !m) return std::nullopt;
  return Op{*phase, *m, *j};
}

// The ops of one non-empty cell in the order they run; nullopt when it is no compute action.
std::optional<std::vector<Op>> parse_cell(std::string_view cell) {
  constexpr std::string_view kOverlap = ")OVERLAP_F_B";
  if (cell.front() != '(') {
    const auto op = parse_action(cell);
    if (!op) return std::nullopt;
    return std::vector<Op>{*op};
  }
  if (!cell.ends_with(kOverlap)) return std::nullopt;
  std::string_view inner = cell.substr(1, cell.size() - 1 - kOverlap.size());
  std::vector<Op> ops;
  for (;;) {
    const auto end = inner.find(';');
    const auto op = parse_action(trim(inner.substr(0, end)));
    if (!op) return std::nullopt;
    ops.push_back(*op);
    if (end == std::string_view::npos) return ops;
    inner.remove_prefix(end + 1);
  }
}

Rows read_rows(std::string_view text, const std::string& source) {
  Rows rows;
  const auto lines = lines_of(text);
  for (std::size_t r = 0; r < lines.size(); ++r) {
    auto& row = rows.emplace_back();
    const auto cells = cells_of(lines[r]);
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (cells[c].empty()) continue;
      const Where where{static_cast<int>(r) + 1, static_cast<int>(c) + 1};
      const auto ops = parse_cell(cells[c]);
      if (!ops)
        fail_at(source, where,
                fmt::format("unknown action '{}' (expected jFm, jBm, jIm, jWm or (a;b)OVERLAP_F_B)", cells[c]));
      for (const Op& op : *ops) row.push_back({op, where});
    }
  }
  return rows;
}

// The row (0-based) of every model stage; checks that each is on one row, that they are
// numbered 0..J-1 with J = `model_stages`, and that every row runs the same number.
std::vector<int> placement_of(const Rows& rows, const std::string& source, int model_stages) {
  int J = 0;
  for (const auto& row : rows)
    for (const Listed& l : row) J = std::max(J, l.op.model_stage + 1);
  if (J == 0) throw InputError(fmt::format("{}: lists no action", source));
  if (J > model_stages)  // before the tables below are sized by J
    throw InputError(fmt::format("{}: lists {} model stages, the pipeline has {}", source, J, model_stages));
  std::vector<int> row_of(J, -1);
  std::vector<Where> first(J);
  for (int r = 0; r < static_cast<int>(rows.size()); ++r)
    for (const Listed& l : rows[r]) {
      const int j = l.op.model_stage;
      if (row_of[j] < 0) {
        row_of[j] = r;
        first[j] = l.where;
      } else if (row_of[j] != r) {
        fail_at(source, l.where,
                fmt::format("model stage {} is on row {} (cell {}) too; a model stage runs on one rank", j,
                            first[j].row, first[j].cell));
      }
    }
  for (int j = 0; j < J; ++j)
    if (row_of[j] < 0)
      throw InputError(fmt::format("{}: model stage {} is on no row, but model stage {} is", source, j, J - 1));
  if (J != model_stages)
    throw InputError(fmt::format("{}: lists {} model stages, the pipeline has {}", source, J, model_stages));
  std::vector<int> count(rows.size());
  for (int j = 0; j < J; ++j) ++count[row_of[j]];
  for (std::size_t r = 1; r < rows.size(); ++r)
    if (count[r] != count[0])
      throw InputError(fmt::format("{}: row {}: runs {} model stages, row 1 runs {}; every rank runs the same number",
                                   source, r + 1, count[r], count[0]));
  return row_of;
}

// Where each op of one (model stage, micro-batch) is in its row: F, B, I, W (-1: absent).
using Slots = std::array<int, 4>;

// Checks that each op is listed once, for a micro-batch below M; returns the slots.
std::vector<Slots> slots_of(Rows& rows, const std::string& source, int J, int M) {
  std::vector<Slots> slots(static_cast<std::size_t>(J) * M, Slots{-1, -1, -1, -1});
  for (auto& row : rows)
    for (int i = 0; i < static_cast<int>(row.size()); ++i) {
      const Op& op = row[i].op;
      if (op.micro_batch >= M)
        fail_at(source, row[i].where, fmt::format("micro-batch {} does not exist (M = {})", op.micro_batch, M));
      int& slot = slots[static_cast<std::size_t>(op.model_stage) * M + op.micro_batch][static_cast<int>(op.phase)];
      if (slot >= 0)
        fail_at(source, row[i].where,
                fmt::format("{} is repeated (first at cell {})", action_name(op), row[slot].where.cell));
      slot = i;
    }
  return slots;
}

// Every (model stage, micro-batch) has F, then B or I, then (after I) W; renames B to I
// where a W follows.
void check_ops(Rows& rows, const std::vector<int>& row_of, const std::string& source, int M) {
  const int J = static_cast<int>(row_of.size());
  const auto slots = slots_of(rows, source, J, M);
  for (int j = 0; j < J; ++j)
    for (int m = 0; m < M; ++m) {
      auto& row = rows[row_of[j]];
      auto [f, b, in, w] = slots[static_cast<std::size_t>(j) * M + m];
      // B and W: written by a PyTorch that named the input half of a split backward B.
      if (b >= 0 && w >= 0 && in < 0) std::swap(b, in);
      auto misses = [&](Phase ph) {
        throw InputError(fmt::format("{}: row {}: misses {}", source, row_of[j] + 1, action_name({ph, m, j})));
      };
      if (b >= 0 && in >= 0)
        fail_at(source, row[std::max(b, in)].where,
                fmt::format("lists {} and {}; a backward is B, or I and W", action_name({Phase::Backward, m, j}),
                            action_name({Phase::BackwardInput, m, j})));
      if (in >= 0) row[in].op.phase = Phase::BackwardInput;
      if (f < 0) misses(Phase::Forward);
      if (b < 0 && in < 0) misses(w >= 0 ? Phase::BackwardInput : Phase::Backward);
      if (in >= 0 && w < 0) misses(Phase::BackwardWeight);
      const int back = std::max(b, in);
      if (back < f)
        fail_at(source, row[back].where,
                fmt::format("{} comes before {}", action_name(row[back].op), action_name(row[f].op)));
      if (w >= 0 && w < in)
        fail_at(source, row[w].where,
                fmt::format("{} comes before {}", action_name(row[w].op), action_name(row[in].op)));
    }
}

// The op with its model stage resolved (-1: the stage's own).
Op resolved(const Op& op, int stage) { return op.model_stage < 0 ? Op{op.phase, op.micro_batch, stage} : op; }

}  // namespace

Schedule parse_torch_csv(std::string_view text, const std::string& source, int model_stages, int M) {
  Rows rows = read_rows(text, source);
  const std::vector<int> row_of = placement_of(rows, source, model_stages);
  check_ops(rows, row_of, source, M);
  Schedule sch;
  sch.spec = ScheduleSpec::custom();
  sch.spec.virtual_stages = model_stages / static_cast<int>(rows.size());
  sch.k = 0;
  for (const auto& row : rows) {
    auto& ops = sch.stages.emplace_back();
    for (const Listed& l : row) ops.push_back(l.op);
  }
  bool own = sch.spec.virtual_stages == 1;
  for (int j = 0; j < model_stages; ++j) own = own && row_of[j] == j;
  if (!own) sch.placement = row_of;
  validate_schedule(sch, sch.num_stages(), M, source);
  return sch;
}

Schedule load_torch_csv(const std::filesystem::path& path, int model_stages, int micro_batches) {
  return parse_torch_csv(read_text_file(path), path.string(), model_stages, micro_batches);
}

std::string torch_csv(const Schedule& sch) {
  std::string out;
  for (int s = 0; s < sch.num_stages(); ++s) {
    for (std::size_t i = 0; i < sch.stages[s].size(); ++i) {
      if (i) out += ',';
      out += action_name(resolved(sch.stages[s][i], s));
    }
    out += '\n';
  }
  return out;
}

std::string schedule_grid(const Schedule& sch) {
  const int S = sch.num_stages();
  std::size_t steps = 0;
  for (const auto& ops : sch.stages) steps = std::max(steps, ops.size());
  std::vector<std::vector<std::string>> cells(S);
  std::vector<std::size_t> width(S);
  for (int s = 0; s < S; ++s) {
    width[s] = fmt::format("Rank {}", s).size();
    for (const Op& op : sch.stages[s])
      width[s] = std::max(width[s], cells[s].emplace_back(action_name(resolved(op, s))).size());
  }
  const std::size_t digits = fmt::format("{}", steps == 0 ? 0 : steps - 1).size();
  auto line = [&](std::string text, auto cell) {
    for (int s = 0; s < S; ++s) text += fmt::format("{}{:<{}}", s ? " " : "", cell(s), width[s]);
    return text.substr(0, text.find_last_not_of(' ') + 1) + '\n';
  };
  std::string out = line(std::string(digits + 7, ' '), [](int s) { return fmt::format("Rank {}", s); });
  for (std::size_t i = 0; i < steps; ++i)
    out += line(fmt::format("Step {:0{}}: ", i, digits),
                [&](int s) { return i < cells[s].size() ? cells[s][i] : std::string(); });
  return out;
}

nlohmann::ordered_json schedule_json(const Schedule& s, int micro_batches) {
  nlohmann::ordered_json j;
  j["schedule"] = s.spec.label();
  j["family"] = s.spec.family;
  j["stages"] = s.num_stages();
  j["virtual_stages"] = s.num_model_stages() / s.num_stages();
  j["model_stages"] = s.num_model_stages();
  j["micro_batches"] = micro_batches;
  auto& placement = j["placement"] = nlohmann::ordered_json::array();
  for (int m = 0; m < s.num_model_stages(); ++m) placement.push_back(s.stage_of(m));
  auto& orders = j["orders"] = nlohmann::ordered_json::array();
  for (const auto& order : s.stages) {
    auto& row = orders.emplace_back(nlohmann::ordered_json::array());
    for (const Op& op : order) row.push_back(action_name(op));
  }
  return j;
}

}  // namespace adagrouper::sim
