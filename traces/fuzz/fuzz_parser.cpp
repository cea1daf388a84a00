// libFuzzer target for one trace parser; FUZZ_FORMAT selects it at compile time
// (csv, samples, simgrid, iperf3, json; "auto" runs format detection first). Any input
// must either parse or throw InputError: a crash, a sanitizer report, another exception
// or a trace that breaks RateTrace's invariants is a bug.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "error.h"
#include "traces.h"

namespace tr = adagrouper::traces;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tr::LoadOptions opt;
  const std::string_view format = FUZZ_FORMAT;
  if (format != "auto") opt.format = tr::format_from_name(format);
  opt.latency_s = 1e-3;
  try {
    // The base directory does not exist: a JSON trace's {"file": ...} fails cleanly.
    const tr::Loaded l = tr::parse_trace(text, "fuzz", opt, "/nonexistent-fuzz-dir");
    const auto& ts = l.trace.rate.times();
    const auto& vs = l.trace.rate.values();
    if (ts.empty() || ts[0] != 0.0) std::abort();
    for (std::size_t i = 0; i < ts.size(); ++i) {
      if (!std::isfinite(vs[i]) || vs[i] < 0) std::abort();
      if (i > 0 && !(ts[i] > ts[i - 1])) std::abort();
    }
    if (l.trace.span_s < ts.back() && !l.trace.repeats()) std::abort();
    // The writers and the reader must agree on what they produce.
    const tr::Loaded back = tr::parse_trace(tr::to_csv(l.trace), "fuzz-csv", {});
    if (!l.trace.repeats() && back.trace.rate.times() != ts) std::abort();
  } catch (const adagrouper::InputError&) {
  }
  return 0;
}
