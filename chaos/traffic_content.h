// Checkable traffic (issue 38): what mw_worker puts in the tensors it sends, so that whoever
// receives a tensor can check every element of it, and knows what it should receive next.
//
// A tensor's content is a function of a ContentKey: the world incarnation's nonce (agreed by the
// members when they join: rank 0 draws it and broadcasts it as the incarnation's first operation),
// the sender's rank and the operation's sequence number in that incarnation. Element i of a
// sender's content is (h(key) + i) mod range, a small integer that every dtype holds exactly, and
// `range` is small enough that the sum of `contributors` contents (a ring all-reduce's result) is
// exact too. So the receiver of a send, of a broadcast or of an all-reduce computes what it must
// find, element by element, and a tensor that is stale (an earlier operation's, an earlier
// incarnation's), partial, repeated, corrupted or another sender's differs from it.
//
// Thread rules: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "multiworld/tensor.h"

namespace mw::chaos {

// Whose content, and which.
struct ContentKey {
  uint64_t nonce = 0;  // the world incarnation's
  int sender = 0;      // the rank that made it
  uint64_t seq = 0;    // the operation's number in the incarnation, from 0
};

// The values an element takes: [0, range), a power of two, such that the sum of `contributors`
// of them is exact in `dtype` (float16: 2048, bfloat16: 256, float32: 2^24, uint8: 256 are the
// largest exact integers). contributors >= 1. At least 1 (a range of 1 makes every element 0: a
// uint8 all-reduce over more than 128 members, whose content then checks only its length).
uint64_t contentRange(DType dtype, int contributors);

// Writes the content of `key` into `data`, `count` elements of `dtype`.
void fillContent(void* data, DType dtype, size_t count, const ContentKey& key, uint64_t range);
// The same for elements [begin, end) only (data points at element 0; the others are untouched).
void fillContent(void* data, DType dtype, size_t begin, size_t end, const ContentKey& key,
                 uint64_t range);

// Where a received tensor first differs from what it should hold.
struct Mismatch {
  size_t offset = 0;    // the first wrong element
  double expected = 0;  // its value as it should be
  double found = 0;     // and as it is
  size_t wrong = 0;     // how many elements differ in all
};

// Compares `data` (count elements of dtype) with the sum of the contents of `keys` (one key: that
// sender's content). Empty when every element is right.
std::optional<Mismatch> checkContent(const void* data, DType dtype, size_t count,
                                     std::span<const ContentKey> keys, uint64_t range);
// The same for elements [begin, end) only (data points at element 0; Mismatch::offset counts from
// there).
std::optional<Mismatch> checkContent(const void* data, DType dtype, size_t begin, size_t end,
                                     std::span<const ContentKey> keys, uint64_t range);

// Whether elements [begin, end) of `data` hold exactly the content of `key` (one sender's),
// stopping at the first element that differs.
bool holdsContent(const void* data, DType dtype, size_t begin, size_t end, const ContentKey& key,
                  uint64_t range);

// A random nonce for a new incarnation (never 0: 0 means "not yet agreed").
uint64_t drawNonce();

}  // namespace mw::chaos
