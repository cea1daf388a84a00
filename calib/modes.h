// The modes of adagrouper-calib. Each runs on every rank of the job and returns the
// process's exit status (0; 2 for bad input found before any device work, reported
// once, by rank 0, on every rank's behalf).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backend.h"
#include "options.h"
#include "runtime.h"

namespace adagrouper::calib {

int run_stages(const Options& options, const Mpi& mpi, Watchdog& watchdog);
int run_p2p(const Options& options, const Mpi& mpi, Watchdog& watchdog);
int run_bandwidth(const Options& options, const Mpi& mpi, Watchdog& watchdog);

// The first line of a mode's JSON Lines output, what ran where: "type": "run", the mode,
// this rank, its host, the backend and its device; the mode adds its settings.
nlohmann::ordered_json run_line(std::string_view mode, const Options& options, const Mpi& mpi, const Backend& backend);

// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> v);

// Stops every rank together when any rank's `error` is not empty: rank 0 prints the
// first one ("adagrouper-calib MODE: ERROR") and every rank gets true.
bool stop_on_error(const Mpi& mpi, const Options& options, const std::string& error);
bool stop_on_error(const Mpi& mpi, std::string_view mode, const std::string& error);

// The backend of options.backend on every rank, or null on every rank when any rank
// failed to create it (rank 0 then has printed the first failure, as stop_on_error).
std::unique_ptr<Backend> make_backend_or_stop(const Options& options, const Mpi& mpi, Watchdog& watchdog);
std::unique_ptr<Backend> make_backend_or_stop(BackendKind kind, std::string_view mode, const Mpi& mpi,
                                              Watchdog& watchdog);

}  // namespace adagrouper::calib
