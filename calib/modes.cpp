// What the modes of adagrouper-calib share (calib/modes.h): stopping ranks together, the median.
#include <algorithm>
#include <iostream>

#include "modes.h"

namespace adagrouper::calib {

nlohmann::ordered_json run_line(std::string_view mode, const Options& options, const Mpi& mpi, const Backend& backend) {
  nlohmann::ordered_json line;
  line["type"] = "run";
  line["mode"] = mode;
  line["rank"] = mpi.rank();
  line["host"] = mpi.id().host;
  line["backend"] = backend_name(options.backend);
  line["device"] = backend.device();
  return line;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool stop_on_error(const Mpi& mpi, std::string_view mode, const std::string& error) {
  const std::string first = mpi.first_error(error);
  if (first.empty()) return false;
  if (mpi.rank() == 0) std::cerr << "adagrouper-calib " << mode << ": " << first << std::endl;
  return true;
}

bool stop_on_error(const Mpi& mpi, const Options& options, const std::string& error) {
  return stop_on_error(mpi, mode_name(options.mode), error);
}

std::unique_ptr<Backend> make_backend_or_stop(BackendKind kind, std::string_view mode, const Mpi& mpi,
                                              Watchdog& watchdog) {
  std::string error;
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(kind, mpi, watchdog);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (stop_on_error(mpi, mode, error)) return nullptr;
  return be;
}

std::unique_ptr<Backend> make_backend_or_stop(const Options& options, const Mpi& mpi, Watchdog& watchdog) {
  return make_backend_or_stop(options.backend, mode_name(options.mode), mpi, watchdog);
}

}  // namespace adagrouper::calib
