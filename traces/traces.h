// adagrouper traces library: the one header to include.
//
//   sim::Network n = sim::load_network("net.json", S, traces::TraceRates());
//   traces::Loaded l = traces::load_trace_file("link.csv");          // csv, json, iperf3,
//                                                                     // simgrid, samples
//   traces::Trace p = traces::make_periodic({.high = 2.8e9, .low = 0.35e9,
//                                            .period_s = 10, .low_fraction = 0.4});
//   traces::TraceStats s = traces::compute_stats(p, 0, 100);
//   write_file_atomic("p.csv", traces::to_csv(p));
//
// File formats and pattern shapes: docs/formats.md, "Trace files and patterns".
#pragma once

#include "formats.h"   // Format, LoadOptions, load_trace_file, parse_trace, to_csv, to_json
#include "kineto.h"    // PyTorch profiler traces: load_kineto, collect_stages, kineto_pipeline
#include "patterns.h"  // Periodic, OnOff, Steps, Contention, make_*
#include "random.h"    // Rng
#include "resolver.h"  // TraceRates, resolve_rate, parse_rate_spec, patterns
#include "stats.h"     // TraceStats, compute_stats
#include "trace.h"     // Trace, TraceBuilder, slice, repeat, scale, clip, shift, concat, min_*
