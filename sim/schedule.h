// Schedules: the op order on each stage (docs/model.md §2), the value that names one
// (ScheduleSpec), and the registry of schedule families that build them.
//
//   ScheduleSpec spec = ScheduleSpec::named("kfkb", 2);       // or parse_schedule_label
//   Schedule s = make_schedule(spec, stages, micro_batches);  // InputError on bad values
//   spec.label()  ->  "kfkb k=2"
//
// To add a family: write its builder in schedule_families.cpp and add one line to the
// table there (name, help, whether it takes k, builder). `--help`, the planner, sweeps
// and error messages all read that table.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace adagrouper::sim {

enum class Phase : std::uint8_t { Forward, Backward };

// One compute op: the phase of one micro-batch.
struct Op {
  Phase phase;
  std::int32_t micro_batch;
  bool operator==(const Op&) const = default;
};

// "F12" / "B3".
std::string op_name(const Op& op);

// Everything that names a schedule: its family and the family's parameters. A plain
// value: compare it, print it (label), rebuild the orders from it (make_schedule).
struct ScheduleSpec {
  std::string family = "1f1b";  // a name in schedule_families(), or "custom" (a schedule file)
  std::optional<int> k;         // group size, for the families that take one (kfkb)

  // A named family with an optional group size.
  static ScheduleSpec named(std::string_view family, std::optional<int> k = std::nullopt);
  // A custom order read from `source` (a schedule file).
  static ScheduleSpec custom();

  bool is_custom() const { return family == "custom"; }
  // "kfkb k=2", "1f1b", "custom".
  std::string label() const;
  // With the micro-batch size: "kfkb k=2 b=4", "1f1b b=8" (names a candidate plan).
  std::string label(int micro_batch_size) const;
  // The same in a sentence: "kfkb k = 2", "1f1b".
  std::string prose() const;

  bool operator==(const ScheduleSpec&) const = default;
};

// A complete schedule: what it is and the order of ops on every stage.
struct Schedule {
  ScheduleSpec spec;
  int k = 1;                            // the group size results report (custom orders: 0)
  std::vector<std::vector<Op>> stages;  // stages[s] = op order on stage s

  const std::string& name() const { return spec.family; }
  int num_stages() const { return static_cast<int>(stages.size()); }
};

// --- the registry of schedule families ------------------------------------------

struct ScheduleFamily {
  std::string_view name;
  std::string_view help;  // one line for --help and the docs
  bool takes_k;           // needs --k (1 <= K <= M)
  // The orders for `stages` stages and `micro_batches` micro-batches; the spec is
  // already checked against the family (k present iff takes_k, within 1..M).
  Schedule (*build)(const ScheduleSpec& spec, int stages, int micro_batches);
};

std::span<const ScheduleFamily> schedule_families();
// nullptr when no family has this name.
const ScheduleFamily* find_schedule_family(std::string_view name);
// "kfkb, 1f1b, gpipe, dapple-b", for messages.
std::string schedule_family_names();
// One line per family, "  NAME  HELP", for --help texts.
std::string schedule_families_help();

// Builds the schedule `spec` names. Throws InputError naming the option (--schedule,
// --k) for an unknown family or a group size it does not take or that lies outside
// 1..M. Custom specs have no builder: load_schedule_file makes them.
Schedule make_schedule(const ScheduleSpec& spec, int stages, int micro_batches);

// Shorthand for make_schedule(ScheduleSpec::named(family, k), stages, micro_batches).
Schedule make_named(std::string_view family, int stages, int micro_batches, std::optional<int> k);

// The orders behind the kfkb family (and 1f1b, gpipe, dapple-b, which are special
// cases of it): micro-batches in groups of k; stage s runs the forward ops of
// warmup_groups[s] groups, then alternates {backward of the oldest group, forward of
// the next group}, then drains the remaining backward groups.
std::vector<std::vector<Op>> grouped_orders(int stages, int micro_batches, int k,
                                            const std::vector<int>& warmup_groups);
// kFkB (docs/model.md §2): W_s = min(S - s, G) groups of k.
Schedule make_kfkb(int stages, int micro_batches, int k);

// Checks that every stage lists F and B of every micro-batch exactly once; throws
// InputError naming `source` and the stage.
void validate_schedule(const Schedule& schedule, int stages, int micro_batches, const std::string& source);

}  // namespace adagrouper::sim
