// Custom schedule files (--schedule-file): one complete op order per stage, given
// explicitly (docs/formats.md, "Custom schedule file"), as adagrouper's JSON or as
// PyTorch's compute-only CSV.
#pragma once

#include <filesystem>

#include "schedule.h"

namespace adagrouper::sim {

// Reads a schedule file for a pipeline of `model_stages` model stages and
// `micro_batches` micro-batches. The result's spec is ScheduleSpec::custom().
//
// The form is told by the file: a name ending in ".csv", or a first non-blank character
// that is a digit, '(' or ',', is PyTorch's compute-only CSV (schedule_csv.h: one row per
// stage, placement and v read from it, model_stages = stages x v); anything else is JSON:
// {"stages": [["F0", "F1", "B0", ...], ...]}, one list per stage, one model stage per
// stage (model_stages lists), ops also written as {"op": "forward"|"backward",
// "micro_batch": m}; each stage lists F and B of every micro-batch exactly once.
Schedule load_schedule_file(const std::filesystem::path& path, int model_stages, int micro_batches);

}  // namespace adagrouper::sim
