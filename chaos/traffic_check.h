// What one traffic loop of mw_worker sends and what it must receive, world incarnation by world
// incarnation (issue 38): the bookkeeping around chaos/traffic_content.h's content.
//
// Each member counts the operations of the loop's pattern in the current incarnation of its world:
// a sender's k-th operation carries the content of (nonce, its rank, k), and a receiver expects,
// from each sender, the content of that sender's next sequence number. A receiver that finds
// something else reports a Finding: which operation, the first wrong element, and, when the
// content is another operation's, which one (a sequence number seen again, missing, or of the
// previous incarnation). It then expects what follows the later operation it found (the ones
// before it are lost), or still the one it expected when it found an earlier one (a message
// delivered twice takes no other's place): one lost or repeated message is one finding, not one
// per operation after it.
//
// How much of each tensor: with Coverage::kSampled (the default) a tensor of up to kWhole elements
// whole, and of a larger one the first and last kEdge elements and one of kStripes equal stripes,
// the operation's sequence number modulo kStripes (a stream's consecutive operations cover every
// element once in kStripes of them); with kEveryElement every element of every tensor. Only those
// elements are filled by the sender and checked by the receiver: a full check reads every byte
// the transport moved, which on one machine costs about as much as moving it (docs/benchmarks.md,
// "Data checks"). What a sample can miss: a change confined to elements outside it (a flipped bit
// in the middle of a large tensor is found in 1 of kStripes operations); what it cannot miss:
// another operation's or incarnation's tensor, a lost or repeated one (every sampled element
// differs then), one whose end never arrived (the last kEdge elements are always checked).
//
// An operation that failed is not judged, and neither is any later operation of its incarnation:
// a failed operation breaks its world (docs/design.md, "Detection"), and whether its message was
// delivered is not known. An incarnation whose nonce was not agreed (0) is not judged either.
//
// Thread rules: one object per traffic loop, used by that loop's thread only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chaos/traffic_content.h"
#include "multiworld/tensor.h"

namespace mw::chaos {

// An operation that completed with the wrong content.
struct Finding {
  uint64_t seq = 0;  // the sequence number the operation should have carried
  Mismatch mismatch;
  std::string detail;  // whose content, and what was found instead when that is known
};

// What a traffic loop checked in one window of its world: mw_worker's `verified` line
// (multiworld/telemetry_lines.h), kept in a WindowRing (multiworld/traffic_windows.h).
struct CheckCounts {
  int64_t ops = 0, bytes = 0, violations = 0;

  CheckCounts& operator+=(const CheckCounts& o) {
    ops += o.ops;
    bytes += o.bytes;
    violations += o.violations;
    return *this;
  }
};

class TrafficCheck {
 public:
  enum class Coverage : uint8_t { kSampled, kEveryElement };
  static constexpr size_t kWhole = 4096;  // elements: a tensor this small is always whole
  static constexpr size_t kEdge = 64;     // elements at each end of a larger one
  static constexpr size_t kStripes = 64;  // and one of this many stripes of it

  // Elements [begin, end) of a tensor.
  struct Range {
    size_t begin = 0, end = 0;
  };

  // A loop whose tensors hold `count` elements of `dtype`; `contributors` is how many members'
  // contents one received tensor sums (an all-reduce: the world's size; otherwise 1).
  TrafficCheck(DType dtype, size_t count, int contributors, Coverage coverage = Coverage::kSampled);

  // At most 3 ranges, in place (no allocation per operation).
  class Regions {
   public:
    void add(Range r) { r_[n_++] = r; }
    const Range* begin() const { return r_.data(); }
    const Range* end() const { return r_.data() + n_; }
    size_t size() const { return n_; }
    const Range& operator[](size_t i) const { return r_[i]; }
    std::span<const Range> span() const { return {r_.data(), n_}; }
    size_t elements() const;  // how many elements the ranges hold

   private:
    std::array<Range, 3> r_{};
    size_t n_ = 0;
  };

  // The elements operation `seq` fills and checks, sorted and disjoint.
  Regions regions(uint64_t seq) const;

  // For a tensor in device memory: the `data` that fill, receive and reduced are given is then a
  // host mirror of it, and these keep the two alike where the check reads and writes. `load` is
  // called with the elements about to be read, before each read (it copies them from the device
  // into the mirror); `store` with the elements just written (fill's content, reduced's zeros),
  // which it copies to the device. Both must be set, or neither (host memory: the default).
  struct Mirror {
    std::function<void(std::span<const Range>)> load, store;
  };
  void setMirror(Mirror m) { mirror_ = std::move(m); }

  // Starts incarnation `generation` of the world (this process's count), whose `members` agreed on
  // `nonce` as its first operation; 0: not agreed, nothing of it is judged.
  void begin(uint64_t generation, uint64_t nonce, int members);

  // The incarnation begin() started last (0 before the first).
  uint64_t generation() const { return generation_; }
  // The sequence number `member`'s next operation carries in this incarnation (0 before begin()).
  uint64_t next(int member) const {
    const auto m = static_cast<size_t>(member);
    return m < next_.size() ? next_[m] : 0;
  }
  // Whether what arrives now is judged: a nonce was agreed and no operation of it failed.
  bool judging() const { return nonce_ != 0 && !failed_; }

  // Writes into `data` the content of `self`'s next operation and counts that operation as sent
  // (its sequence number advances whether or not the operation completes). `self` < members.
  void fill(void* data, int self);
  // Marks this incarnation's operations from now on as not judged: one of them failed.
  void failed() { failed_ = true; }

  // Judges what arrived from `sender` (< members) as its next operation, then expects what
  // follows. Empty when right, or when nothing is judged (judging() false).
  std::optional<Finding> receive(const void* data, int sender);
  // Judges the result of an all-reduce that `self` took part in with the content fill(data, self)
  // wrote: the sum of every member's content of that sequence number. Every member's sequence
  // number is then the next one. With kSampled it then sets the operation's elements to 0: a
  // buffer that was all 0 at every member (see begin's caller, mw_worker) stays 0 outside each
  // operation's sample, so that the sums there never grow. Empty when right or not judged.
  std::optional<Finding> reduced(void* data, int self);

 private:
  ContentKey key(int sender, uint64_t seq) const { return {nonce_, sender, seq}; }
  // checkContent over `rs` (regions(seq) of the operation's seq): the first wrong element of
  // all, and how many.
  std::optional<Mismatch> check(const void* data, std::span<const ContentKey> keys,
                                const Regions& rs) const;
  // Whether the elements of regions(seq) hold `k`'s content.
  bool holds(const void* data, const ContentKey& k) const;
  // "3 of 1024 elements wrong", or "... of 2176 checked elements (of 262144) wrong".
  std::string wrongText(const Mismatch& m, uint64_t seq) const;
  // Which content `data` holds when it is not (nonce_, sender, expected): another sequence number
  // of the same sender near `expected`, or the previous incarnation's. Sets *found_seq for this
  // incarnation's.
  std::string identify(const void* data, int sender, uint64_t expected,
                       std::optional<uint64_t>* found_seq) const;

  DType dtype_;
  size_t count_;
  uint64_t range_;
  Coverage coverage_;
  uint64_t generation_ = 0;
  uint64_t nonce_ = 0;
  uint64_t previous_nonce_ = 0;
  uint64_t previous_last_ = 0;  // the highest sequence number the previous incarnation reached
  bool failed_ = false;
  std::vector<uint64_t> next_;  // per member: its next operation's sequence number
  Mirror mirror_;
};

}  // namespace mw::chaos
