// The future-event set, ordered by time, then by the order in which events were
// scheduled (a sequence number), so that simultaneous events are handled in a fixed
// order and every run is reproducible (as ns-3 keys its scheduler).
//
// A 4-ary min-heap of 128-bit keys: the time's IEEE-754 bits (monotonic for times
// >= 0) above a sequence number and the target component. Comparing two events is one
// unsigned 128-bit comparison without data-dependent branches, and four children sit
// in one 64-byte line, so a pop walks half as many levels as in a binary heap. (Event
// times are unpredictable; branchy comparisons on the heap's dependent chain were the
// engine's largest cost. A radix heap measured slower: the keys share long prefixes.)
// Storage is reserved up front: pushing and popping allocate nothing.
#pragma once

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace adagrouper::sim {

struct Event {
  double time;
  std::uint32_t target;  // which component handles it
};

class EventList {
 public:
  static constexpr int kTargetBits = 24;
  static constexpr std::uint32_t kMaxTargets = 1u << kTargetBits;

  void reserve(std::size_t n) { heap_.reserve(n); }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }

  // time >= 0 and target < kMaxTargets.
  void push(double time, std::uint32_t target) {
    const auto bits = std::bit_cast<std::uint64_t>(time + 0.0);  // + 0.0 turns -0.0 into 0.0
    if (next_seq_ == kMaxSeq) throw std::length_error("EventList: more than 2^40 events in one run");
    const Key key = (static_cast<Key>(bits) << 64) | (next_seq_++ << kTargetBits) | target;
    heap_.push_back(key);
    sift_up(heap_.size() - 1, key);
  }

  // Removes and returns the earliest event (the list must not be empty). The hole at
  // the root moves down along the earliest child to a leaf; the last entry is then
  // sifted up from there.
  Event pop() {
    const Key top = heap_.front();
    const Key last = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n > 0) {
      std::size_t i = 0;
      for (;;) {
        const std::size_t c = 4 * i + 1;
        std::size_t best;
        if (c + 3 < n) {
          const std::size_t a = c + static_cast<std::size_t>(heap_[c + 1] < heap_[c]);
          const std::size_t b = c + 2 + static_cast<std::size_t>(heap_[c + 3] < heap_[c + 2]);
          best = heap_[b] < heap_[a] ? b : a;
        } else if (c < n) {
          best = c;
          for (std::size_t j = c + 1; j < n; ++j) best = heap_[j] < heap_[best] ? j : best;
        } else {
          break;
        }
        heap_[i] = heap_[best];
        i = best;
      }
      sift_up(i, last);
    }
    return {std::bit_cast<double>(static_cast<std::uint64_t>(top >> 64)),
            static_cast<std::uint32_t>(top) & (kMaxTargets - 1)};
  }

 private:
  using Key = unsigned __int128;

  void sift_up(std::size_t i, Key key) {
    while (i > 0) {
      const std::size_t p = (i - 1) / 4;
      if (!(key < heap_[p])) break;
      heap_[i] = heap_[p];
      i = p;
    }
    heap_[i] = key;
  }

  std::vector<Key> heap_;
  static constexpr std::uint64_t kMaxSeq = std::uint64_t{1} << (64 - kTargetBits);
  std::uint64_t next_seq_ = 0;  // 40 bits: a trillion events per run
};

}  // namespace adagrouper::sim
