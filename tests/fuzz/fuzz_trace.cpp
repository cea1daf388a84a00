// libFuzzer target for one trace parser; FUZZ_FORMAT selects it at compile time
// (csv, samples, simgrid, iperf3, json; "auto" runs format detection first). Any input
// must either parse or throw InputError: a crash, a sanitizer report, another exception
// or a trace that breaks RateTrace's invariants is a bug.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "traces.h"

namespace tr = adagrouper::traces;
using adagrouper::fuzz::violated;

namespace {

void check_invariants(const tr::Loaded& l) {
  const auto& ts = l.trace.rate.times();
  const auto& vs = l.trace.rate.values();
  if (ts.empty() || ts[0] != 0.0) violated("the trace does not start at time 0");
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (!std::isfinite(vs[i]) || vs[i] < 0) violated("a value is negative or not finite");
    if (i > 0 && !(ts[i] > ts[i - 1])) violated("the times do not increase strictly");
  }
  if (l.trace.span_s < ts.back() && !l.trace.repeats()) violated("the span is shorter than the last time");
  // The writers and the reader must agree on what they produce.
  const tr::Loaded back = tr::parse_trace(tr::to_csv(l.trace), "fuzz-csv", {});
  if (!l.trace.repeats() && back.trace.rate.times() != ts) violated("the CSV export does not read back");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tr::LoadOptions opt;
  const std::string_view format = FUZZ_FORMAT;
  if (format != "auto") opt.format = tr::format_from_name(format);
  opt.latency_s = 1e-3;
  adagrouper::fuzz::refused_cleanly([&] {
    // The base directory does not exist: a JSON trace's {"file": ...} fails cleanly.
    check_invariants(tr::parse_trace(adagrouper::fuzz::text_of(data, size), "fuzz", opt, "/nonexistent-fuzz-dir"));
  });
  return 0;
}
