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

// The phases of a compute op (docs/model.md §2 and §14): forward, backward, and the two
// halves of a split backward, the gradient with respect to the input (I, which sends
// the gradient on) and with respect to the weights (W, which sends nothing).
enum class Phase : std::uint8_t { Forward, Backward, BackwardInput, BackwardWeight };

// 'F', 'B', 'I', 'W'.
char phase_letter(Phase phase);
// The phase a letter names; nullopt for any other character.
std::optional<Phase> phase_of_letter(char letter);

// One compute op: the phase of one micro-batch of one model stage. model_stage -1 means
// "the stage's own model stage" in schedules with one model stage per stage (the form
// of hand-written orders and of the custom JSON file); make_scenario resolves it.
struct Op {
  Phase phase;
  std::int32_t micro_batch;
  std::int32_t model_stage = -1;
  bool operator==(const Op&) const = default;
};

// "F12", "B3", "I0", "W7": phase and micro-batch.
std::string op_name(const Op& op);
// PyTorch's action form with the model stage first: "2F12", "0W3" (model_stage must be set).
std::string action_name(const Op& op);

// Where model stages run (docs/model.md §14): loop puts model stage j on stage j mod D;
// V (two model stages per stage) puts j on j for j < D and on 2D - 1 - j otherwise.
enum class Placement : std::uint8_t { Loop, V };

// Where W ops run: where the order lists them, or taken out of the order and run
// whenever the stage would otherwise wait (docs/model.md §14, "W fill").
enum class WFill : std::uint8_t { Static, Dynamic };

// Everything that names a schedule: its family and the family's parameters. A plain
// value: compare it, print it (label), rebuild the orders from it (make_schedule).
struct ScheduleSpec {
  std::string family = "1f1b";  // a name in schedule_families(), or "custom" (a schedule file)
  std::optional<int> k;         // group size, for the families that take one (kfkb)
  int virtual_stages = 1;       // model stages per stage (v)
  bool split_backward = false;  // every B becomes I immediately followed by W
  WFill w_fill = WFill::Static;
  std::optional<int> max_pending_w;  // dynamic W fill: P (nullopt: unlimited)

  // A named family with an optional group size, and the family's v when it runs with
  // only one.
  static ScheduleSpec named(std::string_view family, std::optional<int> k = std::nullopt);
  // A custom order read from `source` (a schedule file).
  static ScheduleSpec custom();

  bool is_custom() const { return family == "custom"; }
  // "kfkb k=2", "1f1b", "interleaved-1f1b v=2", "1f1b split-backward w-fill=dynamic
  // max-pending-w=2", "custom": the family and every parameter that is not its default.
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
  // placement[j] = the stage model stage j runs on; empty: one model stage per stage,
  // model stage s on stage s.
  std::vector<int> placement;

  const std::string& name() const { return spec.family; }
  int num_stages() const { return static_cast<int>(stages.size()); }
  int num_model_stages() const { return placement.empty() ? num_stages() : static_cast<int>(placement.size()); }
  int stage_of(int model_stage) const { return placement.empty() ? model_stage : placement[model_stage]; }
};

// --- the registry of schedule families ------------------------------------------

// What a family's orders list for a backward: B ops, I and W ops, or some of each.
// --split-backward splits the B ops of Whole and Mixed families; dynamic W fill moves
// the W ops of Split and Mixed ones (and of any family with --split-backward).
enum class Backward : std::uint8_t { Whole, Split, Mixed };

struct ScheduleFamily {
  std::string_view name;
  std::string_view help;  // one line for --help and the docs
  bool takes_k;           // needs --k (1 <= K <= M)
  Placement placement;    // where its model stages run
  int virtual_stages;     // the only v it runs with (1 or 2), or 0: any v >= 1
  Backward backward;
  // The orders for `stages` stages and `micro_batches` micro-batches, every op with its
  // model stage set, and the group size results report (Schedule::k); spec, placement
  // and the split of B ops are make_schedule's. The spec is already checked against the
  // family (k present iff takes_k, within 1..M; v). Throws InputError naming the option
  // when the family refuses (stages, v, M).
  Schedule (*build)(const ScheduleSpec& spec, int stages, int micro_batches);
};

std::span<const ScheduleFamily> schedule_families();
// nullptr when no family has this name.
const ScheduleFamily* find_schedule_family(std::string_view name);
// "kfkb, 1f1b, gpipe, dapple-b", for messages.
std::string schedule_family_names();
// One line per family, "  NAME  HELP", for --help texts.
std::string schedule_families_help();

// Builds the schedule `spec` names for `stages` stages (each running spec.virtual_stages
// model stages) and M micro-batches: the family's orders, its placement, every B split
// into I then W with --split-backward, and the W ops taken out of the orders with
// dynamic W fill. Throws InputError naming the option (--schedule, --k,
// --virtual-stages, --split-backward, --w-fill, --max-pending-w) for an unknown family
// or a parameter it does not take. Custom specs have no builder: schedule files make them.
Schedule make_schedule(const ScheduleSpec& spec, int stages, int micro_batches);

// The schedule `spec` names, run in the fixed device orders `order` (its W ops listed)
// with static W fill: what a runtime runs that executes a recorded order, such as the
// one dynamic W fill executed in an iteration. Checked as normalize_schedule does (the
// stages' count too), naming `source`.
Schedule fixed_order_schedule(ScheduleSpec spec, int stages, int micro_batches, std::vector<std::vector<Op>> order,
                              const std::string& source);

// The stage each model stage runs on: placement[j] for j < stages x v.
std::vector<int> place_model_stages(Placement placement, int stages, int virtual_stages);

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

// Resolves model_stage -1 (a stage's own model stage, with one per stage) and checks that
// every stage lists, for every micro-batch of each of its model stages, one F and either
// one B or one I and one W (no W with dynamic W fill), and nothing of model stages it
// does not run; throws InputError naming `source`, the stage and the op.
void normalize_schedule(Schedule& schedule, int model_stages, int micro_batches, const std::string& source);
void validate_schedule(const Schedule& schedule, int stages, int micro_batches, const std::string& source);

}  // namespace adagrouper::sim
