// Schedules (SPEC section 2): the order of forward and backward ops on each stage.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace adagrouper::sim {

enum class Phase : std::uint8_t { Forward, Backward };

struct Op {
  Phase phase;
  std::int32_t micro_batch;
  bool operator==(const Op&) const = default;
};

// "F12" / "B3".
std::string op_name(const Op& op);

struct Schedule {
  std::string name;   // kfkb, 1f1b, gpipe, dapple-b or custom
  int k = 1;          // group size (custom: 0)
  std::vector<std::vector<Op>> stages;  // stages[s] = op order on stage s

  int num_stages() const { return static_cast<int>(stages.size()); }
};

// Grouped schedule: micro-batches in groups of k; stage s runs the forward ops of
// warmup_groups[s] groups, then alternates {backward of the oldest group, forward of
// the next group}, then drains the remaining backward groups.
Schedule make_grouped(std::string name, int num_stages, int micro_batches, int k,
                      const std::vector<int>& warmup_groups);
// kFkB (SPEC section 2): W_s = min(S - s, G) groups of k.
Schedule make_kfkb(int num_stages, int micro_batches, int k);
// DAPPLE policy B: k = 1 with W_s = min(2(S - s) - 1, M).
Schedule make_dapple_b(int num_stages, int micro_batches);

// The named schedules: kfkb (needs k), 1f1b, gpipe, dapple-b. Throws InputError for an
// unknown name or a k outside 1..M.
Schedule make_named(std::string_view name, int num_stages, int micro_batches, std::optional<int> k);

// Names accepted by make_named, for help texts.
inline constexpr std::string_view kScheduleNames = "kfkb, 1f1b, gpipe, dapple-b";

// A custom order: {"stages": [["F0", "F1", "B0", ...], ...]} (one list per stage;
// ops may also be written as {"op": "forward"|"backward", "micro_batch": m}).
// Each stage must list F and B of every micro-batch exactly once.
Schedule load_schedule_file(const std::filesystem::path& path, int num_stages, int micro_batches);

// Checks that every stage lists F and B of every micro-batch exactly once; throws
// InputError naming `source` and the stage.
void validate_schedule(const Schedule& schedule, int num_stages, int micro_batches,
                       const std::string& source);

}  // namespace adagrouper::sim
