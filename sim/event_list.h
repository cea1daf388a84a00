// The future-event set: a binary heap of (time, sequence, target) ordered by time,
// then by the order in which events were scheduled, so that simultaneous events are
// handled in a fixed order and every run is reproducible. Storage is reserved up
// front: pushing and popping allocate nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace adagrouper::sim {

struct Event {
  double time;
  std::uint64_t seq;
  std::uint32_t target;  // which component handles it
};

class EventList {
 public:
  void reserve(std::size_t n) { heap_.reserve(n); }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }

  void push(double time, std::uint32_t target) {
    heap_.push_back({time, next_seq_++, target});
    sift_up(heap_.size() - 1);
  }

  Event pop() {
    Event e = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0);
    return e;
  }

  void clear() { heap_.clear(); }

 private:
  static bool before(const Event& a, const Event& b) {
    return a.time < b.time || (a.time == b.time && a.seq < b.seq);
  }
  void sift_up(std::size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      std::size_t p = (i - 1) / 2;
      if (!before(e, heap_[p])) break;
      heap_[i] = heap_[p];
      i = p;
    }
    heap_[i] = e;
  }
  void sift_down(std::size_t i) {
    const std::size_t n = heap_.size();
    Event e = heap_[i];
    for (;;) {
      std::size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && before(heap_[c + 1], heap_[c])) ++c;
      if (!before(heap_[c], e)) break;
      heap_[i] = heap_[c];
      i = c;
    }
    heap_[i] = e;
  }

  std::vector<Event> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace adagrouper::sim
