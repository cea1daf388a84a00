// adagrouper simulator core: the one header to include.
//
//   Pipeline p = load_pipeline("pipe.json");
//   Network n = load_network("net.json", p.num_stages(), traces::TraceRates());
//   Schedule s = make_schedule(ScheduleSpec::named("kfkb", 2), S, M);
//   Scenario sc = make_scenario(p, n, s, b, iterations);
//   SimResult r = simulate(sc, {.timeline = true});
//   summary_json(r), timeline_json(r)
//
// Layers, front to back (docs/model.md, "Architecture"): the model (rates, pipeline,
// network, schedules, scenario, accounting, results) in sim/, the evaluators behind
// simulate() in sim/eval/, which nothing outside sim/ includes.
#pragma once

#include "accounting.h"     // Level, stage_memory, replay_counts, Counter
#include "compare.h"        // Summary, compare, rank_agreement (prediction vs measurement)
#include "error.h"          // InputError, SimError
#include "io.h"             // write_file_atomic
#include "network.h"        // NetworkSpec, Network, ChannelSpec
#include "pipeline.h"       // Pipeline, StageParams
#include "rate.h"           // RateTrace, RateCursor
#include "rate_forms.h"     // RateParser, BasicRates
#include "result.h"         // SimResult, summary_json, summary_text, timeline_json
#include "scenario.h"       // Scenario, OpTiming, make_scenario, set_op_timings
#include "schedule.h"       // ScheduleSpec, Schedule, schedule_families, make_schedule
#include "schedule_csv.h"   // parse_torch_csv, torch_csv, schedule_grid (PyTorch's CSV)
#include "schedule_file.h"  // load_schedule_file
#include "schedule_torch.h" // PyTorch's schedules: build_interleaved_1f1b, build_zbv, ...
#include "simulate.h"       // SimOptions, Evaluator, simulate, find_dependency_cycle
