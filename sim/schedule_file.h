// Custom schedule files (--schedule-file): one complete op order per stage, given
// explicitly (docs/formats.md, "Custom schedule file").
#pragma once

#include <filesystem>

#include "schedule.h"

namespace adagrouper::sim {

// {"stages": [["F0", "F1", "B0", ...], ...]}: one list per stage; ops may also be
// written as {"op": "forward"|"backward", "micro_batch": m}. Each stage must list F and
// B of every micro-batch exactly once. The result's spec is ScheduleSpec::custom().
Schedule load_schedule_file(const std::filesystem::path& path, int stages, int micro_batches);

}  // namespace adagrouper::sim
