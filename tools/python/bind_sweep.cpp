// adagrouper.sweep() over a list of configuration dicts, and run_study() over a sweep
// spec (tools/sweep/sweep.h): many simulations on C++ worker threads, results in order.
#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "run.h"
#include "sweep.h"

namespace adagrouper::python {

namespace {

// Runs work(i) for i in [0, n) on `jobs` threads (0: every CPU this process may use), and
// then rethrows the first exception a call threw, if any. Call without the GIL.
void parallel_for(std::size_t n, int jobs, const std::function<void(std::size_t)>& work) {
  const auto cpus = static_cast<std::size_t>(jobs > 0 ? jobs : sweep::available_cpus());
  const std::size_t threads = std::min(n, cpus);
  std::atomic<std::size_t> next{0};
  std::exception_ptr first;
  std::mutex first_mutex;
  auto worker = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        work(i);
      } catch (...) {
        const std::lock_guard lock(first_mutex);
        if (!first) first = std::current_exception();
      }
    }
  };
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (std::size_t t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (auto& th : pool) th.join();
  }
  if (first) std::rethrow_exception(first);
}

int jobs_arg(int jobs) {
  if (jobs < 0) throw InputError(fmt::format("--jobs: must be >= 0, got {}", jobs));
  return jobs;
}

// One configuration, resolved with the GIL held: the objects it runs on and its options,
// or why it cannot run.
struct Job {
  std::shared_ptr<const sim::Pipeline> pipeline;
  std::shared_ptr<const sim::NetworkSpec> network;
  RunOptions options;
  std::optional<Failure> failure;
  nlohmann::ordered_json summary;
};

// Pipelines and networks are read once per sweep: per dict object and per path.
struct Loaded {
  std::map<std::string, std::shared_ptr<const sim::Pipeline>> pipelines;
  std::map<std::string, std::shared_ptr<const sim::NetworkSpec>> networks;

  static std::string key(py::handle v) {
    return is_path(v) ? "path:" + as_path(v).string() : fmt::format("object:{}", static_cast<const void*>(v.ptr()));
  }
  std::shared_ptr<const sim::Pipeline> pipeline(py::handle v) {
    auto& slot = pipelines[key(v)];
    if (!slot) slot = pipeline_arg(v);
    return slot;
  }
  std::shared_ptr<const sim::NetworkSpec> network(py::handle v) {
    auto& slot = networks[key(v)];
    if (!slot) slot = network_arg(v);
    return slot;
  }
};

Job prepare(py::handle config, const py::dict& defaults, std::size_t i, Loaded& loaded) {
  const std::string where = fmt::format("configs[{}]", i);
  if (!py::isinstance<py::dict>(config))
    throw py::type_error(fmt::format("{}: a dict, got {}", where, py::repr(config).cast<std::string>()));
  py::dict merged = defaults.attr("copy")();
  merged.attr("update")(config);
  Job job;
  for (const auto& [k, value] : merged) {
    const std::string key = py::str(k).cast<std::string>();
    if (key == "pipeline" || key == "network") continue;
    if (key == "timeline") throw InputError(fmt::format("{}: timeline: a sweep records no timeline", where));
    if (!set_run_option(job.options, key, value))
      throw InputError(fmt::format("{}: unknown key '{}' (pipeline, network, {})", where, key, run_option_names()));
  }
  for (const char* key : {"pipeline", "network"})
    if (!merged.contains(key)) throw InputError(fmt::format("{}: {}: missing", where, key));
  try {
    job.pipeline = loaded.pipeline(merged["pipeline"]);
    job.network = loaded.network(merged["network"]);
  } catch (const adagrouper::InputError&) {
    job.failure = capture_failure(std::current_exception());
  }
  return job;
}

py::list collect(std::vector<Job>& jobs, bool return_exceptions) {
  py::list out(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].failure) {
      out[i] = to_python(jobs[i].summary);
      continue;
    }
    py::object error = failure_object(*jobs[i].failure);
    error.attr("index") = i;
    if (!return_exceptions) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
      throw py::error_already_set();
    }
    out[i] = error;
  }
  return out;
}

constexpr const char* kSweepDoc = R"(Simulates every configuration of a list on C++ worker threads and returns
their summaries (as simulate() returns them) in the order of the list.

Each configuration is a dict of simulate()'s arguments: pipeline, network (objects,
dicts or paths), micro_batch_size, schedule, k, iterations, start_time, virtual_stages,
split_backward, w_fill, max_pending_w, schedule_file, stage_trace, message_trace,
evaluator. Keyword arguments of sweep() other than jobs and return_exceptions are
defaults for every configuration. Pipelines and networks given as paths or dicts are read once.

jobs: worker threads (0: every CPU this process may use). A configuration that fails
raises its InputError / SimError (with an `index` attribute: its position), or, with
return_exceptions=True, leaves that exception in its place in the list.)";

constexpr const char* kStudyDoc = R"(Runs a sweep spec (docs/formats.md, "Sweep spec and output"; a dict or a
path) as `adagrouper sweep` does, on C++ worker threads, and returns its rows, one dict
per run in the spec's order with the columns of the CSV output (a run's error in its
"error" column). source names a dict spec in messages and anchors its relative paths
(default: the current directory).)";

}  // namespace

void bind_sweep(py::module_& m) {
  m.def(
      "sweep",
      [](const py::sequence& configs, int jobs, bool return_exceptions, const py::kwargs& defaults) {
        jobs = jobs_arg(jobs);
        const py::dict base(defaults);
        Loaded loaded;
        std::vector<Job> work;
        work.reserve(configs.size());
        for (std::size_t i = 0; i < configs.size(); ++i) work.push_back(prepare(configs[i], base, i, loaded));
        {
          py::gil_scoped_release release;
          parallel_for(work.size(), jobs, [&](std::size_t i) {
            Job& job = work[i];
            if (job.failure) return;
            try {
              job.summary = run_simulation(*job.pipeline, *job.network, job.options).summary;
            } catch (...) {
              job.failure = capture_failure(std::current_exception());
            }
          });
        }
        return collect(work, return_exceptions);
      },
      kSweepDoc, py::arg("configs"), py::kw_only(), py::arg("jobs") = 0, py::arg("return_exceptions") = false);

  m.def(
      "run_study",
      [](py::object spec, int jobs, std::optional<std::string> source) {
        jobs = jobs_arg(jobs);
        std::optional<nlohmann::json> doc;
        std::string path;
        if (is_path(spec)) path = as_path(spec).string();
        else doc = to_json(spec, "spec");
        std::vector<nlohmann::ordered_json> rows;
        {
          py::gil_scoped_release release;
          const sweep::Study study = doc ? sweep::parse_study(*doc, source.value_or("<dict>")) : sweep::load_study(path);
          std::vector<std::size_t> all(study.runs.size());
          for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
          const sweep::Inputs inputs(study, all);
          rows.resize(all.size());
          parallel_for(all.size(), jobs, [&](std::size_t i) { rows[i] = sweep::run_row(study, inputs, study.runs[i]); });
        }
        py::list out(rows.size());
        for (std::size_t i = 0; i < rows.size(); ++i) out[i] = to_python(rows[i]);
        return out;
      },
      kStudyDoc, py::arg("spec"), py::kw_only(), py::arg("jobs") = 0, py::arg("source") = py::none());
}

}  // namespace adagrouper::python
