// The Chrome trace / Perfetto JSON of a run's timeline (docs/model.md §10).
#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "result.h"

namespace adagrouper::sim {

namespace {

constexpr double kUs = 1e6;

// Threads of a stage's process: 1 compute; the channel ends to and from the neighbours
// 2 (send to s+1), 3 (send to s-1), 4 (recv from s-1), 5 (recv from s+1); to and from any
// other stage p, 6 + 2p and 7 + 2p.
int send_tid(int from, int to) { return to == from + 1 ? 2 : to + 1 == from ? 3 : 6 + 2 * to; }
int recv_tid(int from, int to) { return from + 1 == to ? 4 : from == to + 1 ? 5 : 7 + 2 * from; }

const char* category(Phase phase) {
  constexpr const char* kNames[] = {"forward", "backward", "backward-input", "backward-weight"};
  return kNames[static_cast<int>(phase)];
}

class TraceWriter {
 public:
  explicit TraceWriter(std::size_t reserve) {
    out_.reserve(reserve);
    out_ += "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  }
  void emit(const std::string& e) {
    if (!first_) out_ += ",\n";
    first_ = false;
    out_ += e;
  }
  std::string finish() { return std::move(out_) + "\n]}\n"; }

 private:
  std::string out_;
  bool first_ = true;
};

void thread_name(TraceWriter& w, int stage, int tid, const std::string& name) {
  w.emit(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}})", stage + 1, tid,
                     name));
}

void processes(TraceWriter& w, const SimResult& r) {
  const int S = r.num_stages;
  std::set<std::pair<int, int>> far;  // channels between stages that are not neighbours
  for (const auto& t : r.timeline->transfers)
    if (t.to != t.from + 1 && t.to + 1 != t.from) far.insert({t.from, t.to});
  for (int s = 0; s < S; ++s) {
    const int pid = s + 1;
    w.emit(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":"stage {}"}}}})", pid, s));
    w.emit(fmt::format(R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})", pid,
                       s));
    thread_name(w, s, 1, "compute");
    if (s + 1 < S) {
      thread_name(w, s, 2, fmt::format("send to {}", s + 1));
      thread_name(w, s, 5, fmt::format("recv from {}", s + 1));
    }
    if (s > 0) {
      thread_name(w, s, 3, fmt::format("send to {}", s - 1));
      thread_name(w, s, 4, fmt::format("recv from {}", s - 1));
    }
    for (const auto& [from, to] : far) {
      if (from == s) thread_name(w, s, send_tid(from, to), fmt::format("send to {}", to));
      if (to == s) thread_name(w, s, recv_tid(from, to), fmt::format("recv from {}", from));
    }
  }
}

void ops(TraceWriter& w, const SimResult& r) {
  const bool model_stages = r.model_stages != r.num_stages;
  for (const auto& o : r.timeline->ops) {
    const std::string extra = model_stages ? fmt::format(R"(,"model_stage":{},"phase":"{}")", o.op.model_stage,
                                                         phase_letter(o.op.phase))
                                           : std::string();
    w.emit(fmt::format(
        R"({{"ph":"X","cat":"{}","name":"{}","pid":{},"tid":1,"ts":{},"dur":{},"args":{{"iteration":{},"micro_batch":{}{}}}}})",
        category(o.op.phase), model_stages ? action_name(o.op) : op_name(o.op), o.stage + 1, o.start * kUs,
        (o.end - o.start) * kUs, o.iteration, o.op.micro_batch, extra));
  }
}

void optimizer(TraceWriter& w, const SimResult& r) {
  for (const auto& o : r.timeline->optimizer)
    w.emit(fmt::format(
        R"({{"ph":"X","cat":"optimizer","name":"optimizer","pid":{},"tid":1,"ts":{},"dur":{},"args":{{"iteration":{}}}}})",
        o.stage + 1, o.start * kUs, (o.end - o.start) * kUs, o.iteration));
}

// Each transfer: its slice from when the bytes start to move (after the latency) to its
// end, on the sender's and the receiver's channel end, linked by a flow arrow; and when
// the message waited for the channel, an async "queued to N" slice on the sender from
// when it was ready to when its transfer started (async: several messages can wait at
// once, and complete slices on one thread must nest).
void transfers(TraceWriter& w, const SimResult& r) {
  const bool model_stages = r.model_stages != r.num_stages;
  std::uint64_t flow = 0;
  for (const auto& t : r.timeline->transfers) {
    ++flow;
    const char kind = t.gradient ? 'B' : 'F';
    const std::string name = model_stages ? fmt::format("{}{}{} {}->{}", t.model_stage, kind, t.micro_batch, t.from, t.to)
                                          : fmt::format("{}{} {}->{}", kind, t.micro_batch, t.from, t.to);
    const std::string args =
        fmt::format(R"("args":{{"iteration":{},"micro_batch":{},"bytes":{}}})", t.iteration, t.micro_batch, t.bytes);
    const int sender = send_tid(t.from, t.to);
    w.emit(fmt::format(
        R"({{"ph":"X","cat":"transfer","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"bind_id":{},"flow_out":true,{}}})",
        name, t.from + 1, sender, t.moving * kUs, (t.end - t.moving) * kUs, flow, args));
    w.emit(fmt::format(
        R"({{"ph":"X","cat":"transfer","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"bind_id":{},"flow_in":true,{}}})",
        name, t.to + 1, recv_tid(t.from, t.to), t.moving * kUs, (t.end - t.moving) * kUs, flow, args));
    if (t.ready < t.start) {
      const std::string queued = fmt::format(R"("cat":"queued","name":"queued to {}","id":{},"pid":{},"tid":{})",
                                             t.to, flow, t.from + 1, sender);
      w.emit(fmt::format(R"({{"ph":"b",{},"ts":{},"args":{{"message":"{}","iteration":{},"micro_batch":{}}}}})",
                         queued, t.ready * kUs, name, t.iteration, t.micro_batch));
      w.emit(fmt::format(R"({{"ph":"e",{},"ts":{}}})", queued, t.start * kUs));
    }
  }
}

void counters(TraceWriter& w, const SimResult& r) {
  for (const auto& c : r.timeline->counters) {
    if (c.kind == Counter::Memory) {
      w.emit(fmt::format(R"({{"ph":"C","name":"memory","pid":{},"ts":{},"args":{{"bytes":{}}}}})", c.stage + 1,
                         c.time * kUs, c.value));
    } else {
      w.emit(fmt::format(R"({{"ph":"C","name":"queue from {}","pid":{},"ts":{},"args":{{"messages":{}}}}})", c.peer,
                         c.stage + 1, c.time * kUs, c.value));
    }
  }
}

void rates(TraceWriter& w, const SimResult& r) {
  for (const auto& x : r.timeline->rates)
    w.emit(fmt::format(R"({{"ph":"C","name":"bandwidth to {}","pid":{},"ts":{},"args":{{"bytes_per_s":{}}}}})", x.to,
                       x.from + 1, x.time * kUs, x.value));
}

}  // namespace

std::string timeline_json(const SimResult& r) {
  const Timeline& tl = *r.timeline;
  TraceWriter w(256 + 200 * (tl.ops.size() + tl.optimizer.size() + 3 * tl.transfers.size()) +
               100 * (tl.counters.size() + tl.rates.size()));
  processes(w, r);
  ops(w, r);
  optimizer(w, r);
  transfers(w, r);
  counters(w, r);
  rates(w, r);
  return w.finish();
}

}  // namespace adagrouper::sim
