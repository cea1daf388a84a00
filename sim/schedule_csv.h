// PyTorch's compute-only schedule CSV (torch.distributed.pipelining's _load_csv and
// _dump_csv with format "compute_only"): reading one into a Schedule, writing one, and a
// readable step-by-stage grid of a schedule.
//
// The format: one row per rank (stage), cells separated by commas, each cell one action:
// `jFm`, `jBm`, `jIm` or `jWm` (model stage j, phase, micro-batch m), or an overlapped
// pair `(a;b)OVERLAP_F_B`, which runs a then b. Empty cells are idle steps and are
// ignored. Each model stage runs on the one rank whose row lists it; every rank runs the
// same number v of model stages.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "schedule.h"

namespace adagrouper::sim {

// Reads the CSV `text` (`source` names it in messages) for a pipeline of `model_stages`
// model stages and `micro_batches` micro-batches. The result's placement is read from the
// rows (left empty when it is one model stage per stage, model stage d on stage d, as
// make_schedule leaves it); its spec is ScheduleSpec::custom() with virtual_stages = v and
// its k is 0. Older PyTorch artifacts write B where today's PyTorch writes I for the
// input half of a split backward: a (model stage, micro-batch) listed with B and W is read
// as I and W. Throws InputError naming the source, the row and the cell (1-based), e.g.
// "sched.csv: row 2, cell 5: unknown action 'X3'", for an unknown action, a model stage
// on two rows, rows with different numbers of model stages, a repeated op, a backward
// before its forward or a W before its I, or (naming the row) a missing op.
Schedule parse_torch_csv(std::string_view text, const std::string& source, int model_stages, int micro_batches);
// parse_torch_csv on the file's contents.
Schedule load_torch_csv(const std::filesystem::path& path, int model_stages, int micro_batches);

// The schedule as PyTorch's compute-only CSV: one row per stage, its ops in order in
// PyTorch's notation ("2F0"; the model stage is always written, -1 meaning the stage's
// own), no empty cells, no trailing comma, each row ending in "\n".
std::string torch_csv(const Schedule& schedule);

// A step-by-stage table like PyTorch's _format_pipeline_order: a header of "Rank d"
// columns, then one row "Step i: ..." per step i with the i-th op of each stage ("" past
// its last), columns padded to their widest cell, no trailing spaces.
std::string schedule_grid(const Schedule& schedule);

// The schedule as the JSON `adagrouper schedule --format json` prints: its label,
// family, stages, virtual and model stages, micro-batches, placement (the stage of each
// model stage) and orders (per stage, its ops in PyTorch's notation).
nlohmann::ordered_json schedule_json(const Schedule& schedule, int micro_batches);

}  // namespace adagrouper::sim
