// adagrouper calibration harness: the one header to include.
//
//   Mpi mpi(argc, argv);                                   // runtime.h
//   Watchdog dog(mpi, /*timeout_s=*/300);
//   auto be = make_backend(BackendKind::cuda, mpi, dog);   // backend.h: streams, events,
//   auto s = be->create_stream();                          //   kernels, channels
//   StageModel m(*be, *s, load_stage_description(f), stage, b, seed);   // stage_model.h
//   m.forward(*s, 0); m.backward(*s, 0); s->synchronize();
//   auto links = be->connect({{0, 1}, {1, 0}}, max_bytes); // one communicator each
//   links[0]->send(*s, bytes);
//
// The modes of adagrouper-calib (stages, p2p, bandwidth) are in modes.h; the command line
// in options.h; measured transfers become trace files and network files in samples.h.
// docs/calibration.md describes the inputs, outputs and how to run it.
#pragma once

#include "backend.h"      // Backend, Stream, Event, Buffer, Kernels, Channel, make_backend
#include "description.h"  // StageDescription, load_stage_description, layer_shape
#include "modes.h"        // run_stages, run_p2p, run_bandwidth, median
#include "options.h"      // Options, parse_options, parse_size, size_series, usage
#include "runtime.h"      // Mpi, Identity, CalibError, Watchdog, JsonlWriter, now_s
#include "samples.h"      // ChannelSamples, samples_csv, network_json, effective_rate
#include "stage_model.h"  // StageModel, LayerSizes
