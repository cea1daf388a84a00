// The future-event set, ordered by time, then by the order in which events were
// scheduled (a sequence number), so that simultaneous events are handled in a fixed
// order and every run is reproducible (as ns-3 keys its scheduler).
//
// Every component (a stage's compute stream, a channel) has at most one pending event:
// the end of the op or transfer it is busy with. The set is therefore a tournament
// (winner) tree with one fixed leaf per component, not a heap: a node holds the
// earliest key below it, the root the earliest of all. Scheduling an event replays the
// leaf's path to the root: at each level one comparison with the sibling's key, and
// the sibling loads do not depend on each other, so the processor overlaps them (a
// heap's sift-down is a chain of dependent loads and branches; that chain was the
// engine's largest cost).
//
// pop() returns the root without replaying. The handler that runs next usually
// schedules the same component again (a stage starts its next op), and then one replay
// both removes the old event and inserts the new one; if it does not, the leaf is
// cleared lazily before the next query.
//
// A key is 128 bits: the time's IEEE-754 bits (monotonic for times >= 0) above a
// sequence number and the component; the sequence's top bit marks events that must come
// after every other event at their time (push_last). Storage is fixed at construction: scheduling and
// popping allocate nothing.
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

  // A set for components 0 .. targets-1 (targets <= kMaxTargets).
  explicit EventList(std::uint32_t targets = 1) {
    if (targets > kMaxTargets) throw std::length_error("EventList: too many components");
    leaves_ = std::bit_ceil(targets < 2 ? 2u : targets);
    tree_.assign(2 * static_cast<std::size_t>(leaves_), kNone);
  }

  bool empty() {
    flush();
    return tree_[1] == kNone;
  }

  // Schedules `target`'s event at `time` (>= 0), replacing any it had pending.
  void push(double time, std::uint32_t target) { push(time, target, 0); }

  // The same, but after every event at `time` that push() schedules, whenever it is
  // scheduled: for a decision that must see everything that happens at that instant.
  void push_last(double time, std::uint32_t target) { push(time, target, kLastBit); }

  // Removes and returns the earliest event (the set must not be empty).
  Event pop() {
    flush();
    const Key top = tree_[1];
    const auto target = static_cast<std::uint32_t>(top) & (kMaxTargets - 1);
    popped_ = target;  // its leaf is cleared lazily (see flush)
    return {std::bit_cast<double>(static_cast<std::uint64_t>(top >> 64)), target};
  }

 private:
  using Key = unsigned __int128;
  static constexpr Key kNone = ~Key{0};  // no event: later than every real key
  static constexpr std::uint32_t kNoTarget = ~std::uint32_t{0};

  void push(double time, std::uint32_t target, std::uint64_t tier) {
    const auto bits = std::bit_cast<std::uint64_t>(time + 0.0);  // + 0.0 turns -0.0 into 0.0
    if (next_seq_ == kMaxSeq) throw std::length_error("EventList: more than 2^39 events in one run");
    if (target == popped_) popped_ = kNoTarget;
    replay(target, (static_cast<Key>(bits) << 64) | ((tier | next_seq_++) << kTargetBits) | target);
  }

  void flush() {
    if (popped_ != kNoTarget) {
      replay(popped_, kNone);
      popped_ = kNoTarget;
    }
  }

  void replay(std::uint32_t target, Key key) {
    std::size_t i = leaves_ + target;
    tree_[i] = key;
    while (i > 1) {
      const Key sibling = tree_[i ^ 1];
      key = sibling < key ? sibling : key;
      i >>= 1;
      tree_[i] = key;
    }
  }

  std::vector<Key> tree_;  // tree_[1] is the root; leaves at [leaves_, 2 * leaves_)
  std::uint32_t leaves_ = 0;
  std::uint32_t popped_ = kNoTarget;
  // The sequence's top bit orders push_last events after push events at the same time.
  static constexpr std::uint64_t kLastBit = std::uint64_t{1} << (63 - kTargetBits);
  static constexpr std::uint64_t kMaxSeq = kLastBit;
  std::uint64_t next_seq_ = 0;  // 39 bits: half a trillion events per run
};

}  // namespace adagrouper::sim
