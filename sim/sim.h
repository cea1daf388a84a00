// adagrouper simulator core: the one header to include.
//
//   Pipeline p = load_pipeline("pipe.json");
//   Network n = load_network("net.json", p.num_stages());
//   Scenario sc = make_scenario(p, n, make_named("kfkb", S, M, 2), b, iterations);
//   SimResult r = simulate(sc, {.timeline = true});
//   summary_json(r), timeline_json(r)
//
// The model is SPEC.md sections 1-4; docs/model.md explains it.
#pragma once

#include "compare.h"    // Summary, compare, rank_agreement (prediction vs measurement)
#include "engine.h"     // Scenario, simulate, find_dependency_cycle
#include "error.h"      // InputError, SimError
#include "io.h"         // write_file_atomic
#include "network.h"    // Network, ChannelSpec, parse_rate
#include "pipeline.h"   // Pipeline, StageParams
#include "rate.h"       // RateTrace, RateCursor
#include "result.h"     // SimResult, summary_json, summary_text, timeline_json
#include "schedule.h"   // Schedule, make_named, load_schedule_file
