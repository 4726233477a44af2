#include "chaos/traffic_check.h"

#include <algorithm>
#include <cstring>

namespace mw::chaos {
namespace {

// How far from the expected sequence number identify() looks for the content that arrived.
constexpr uint64_t kNear = 16;

}  // namespace

TrafficCheck::TrafficCheck(DType dtype, size_t count, int contributors, Coverage coverage)
    : dtype_(dtype),
      count_(count),
      range_(contentRange(dtype, contributors)),
      coverage_(coverage) {}

size_t TrafficCheck::Regions::elements() const {
  size_t n = 0;
  for (const Range& r : *this) n += r.end - r.begin;
  return n;
}

TrafficCheck::Regions TrafficCheck::regions(uint64_t seq) const {
  Regions out;
  if (coverage_ == Coverage::kEveryElement || count_ <= kWhole) {
    out.add({0, count_});
    return out;
  }
  const size_t stripe = (count_ + kStripes - 1) / kStripes;
  const size_t b = static_cast<size_t>(seq % kStripes) * stripe;
  std::array<Range, 3> r = {Range{0, kEdge}, Range{b, std::min(count_, b + stripe)},
                            Range{count_ - kEdge, count_}};
  std::sort(r.begin(), r.end(), [](const Range& x, const Range& y) { return x.begin < y.begin; });
  Range cur{0, 0};
  bool open = false;
  for (const Range& x : r) {
    if (x.begin >= x.end) continue;
    if (open && x.begin <= cur.end) {
      cur.end = std::max(cur.end, x.end);
    } else {
      if (open) out.add(cur);
      cur = x;
      open = true;
    }
  }
  if (open) out.add(cur);
  return out;
}

void TrafficCheck::begin(uint64_t generation, uint64_t nonce, int members) {
  if (nonce_ != 0) {
    previous_nonce_ = nonce_;
    previous_last_ = next_.empty() ? 0 : *std::max_element(next_.begin(), next_.end());
  }
  generation_ = generation;
  nonce_ = nonce;
  failed_ = false;
  next_.assign(static_cast<size_t>(std::max(members, 1)), 0);
}

void TrafficCheck::fill(void* data, int self) {
  uint64_t& seq = next_.at(static_cast<size_t>(self));
  const Regions rs = regions(seq);
  for (const Range& r : rs) fillContent(data, dtype_, r.begin, r.end, key(self, seq), range_);
  if (mirror_.store) mirror_.store(rs.span());
  ++seq;
}

std::optional<Mismatch> TrafficCheck::check(const void* data, std::span<const ContentKey> keys,
                                            const Regions& rs) const {
  std::optional<Mismatch> all;
  if (mirror_.load) mirror_.load(rs.span());
  for (const Range& r : rs) {
    auto m = checkContent(data, dtype_, r.begin, r.end, keys, range_);
    if (!m) continue;
    if (!all) {
      all = *m;
    } else {
      all->wrong += m->wrong;
    }
  }
  return all;
}

bool TrafficCheck::holds(const void* data, const ContentKey& k) const {
  const Regions rs = regions(k.seq);
  if (mirror_.load) mirror_.load(rs.span());
  for (const Range& r : rs) {
    if (!holdsContent(data, dtype_, r.begin, r.end, k, range_)) return false;
  }
  return true;
}

std::string TrafficCheck::wrongText(const Mismatch& m, uint64_t seq) const {
  const size_t checked = regions(seq).elements();
  std::string t = std::to_string(m.wrong) + " of " + std::to_string(checked);
  if (checked == count_) return t + " elements wrong";
  return t + " checked elements (of " + std::to_string(count_) + ") wrong";
}

std::optional<Finding> TrafficCheck::receive(const void* data, int sender) {
  uint64_t& next = next_.at(static_cast<size_t>(sender));
  const uint64_t expected = next++;
  if (!judging()) return std::nullopt;
  const ContentKey want = key(sender, expected);
  const Regions rs = regions(expected);
  auto m = check(data, std::span(&want, 1), rs);
  if (!m) return std::nullopt;
  Finding f{expected, *m, "from rank " + std::to_string(sender) + ": "};
  if (m->wrong < rs.elements()) {  // part of the right content: corrupted, or partly another's
    f.detail += wrongText(*m, expected);
    return f;
  }
  std::optional<uint64_t> found;
  f.detail += identify(data, sender, expected, &found);
  // A later operation's content: those before it are lost, and what follows it comes next. An
  // earlier one's (delivered again, or stale) took the place of none: `expected` still comes.
  if (found) next = *found > expected ? *found + 1 : expected;
  return f;
}

std::optional<Finding> TrafficCheck::reduced(void* data, int self) {
  const uint64_t seq = next_.at(static_cast<size_t>(self)) - 1;  // fill() counted it
  for (auto& n : next_) n = seq + 1;
  std::optional<Finding> out;
  const Regions rs = regions(seq);
  if (judging()) {
    std::vector<ContentKey> keys;
    for (size_t r = 0; r < next_.size(); ++r) keys.push_back(key(static_cast<int>(r), seq));
    if (auto m = check(data, keys, rs)) {
      out = Finding{seq, *m,
                    "the sum of " + std::to_string(keys.size()) +
                        " members' contents: " + wrongText(*m, seq)};
      const size_t checked = rs.elements();
      // Every element wrong: an earlier operation's sum delivered again? (A later one's cannot
      // have arrived: every member's next operation starts after this one completed.)
      for (uint64_t s = seq; m->wrong == checked && s > 0 && seq - s < kNear;) {
        --s;
        for (size_t r = 0; r < keys.size(); ++r) keys[r] = key(static_cast<int>(r), s);
        if (!check(data, keys, regions(s))) {
          out->detail += ": the sum of its seq " + std::to_string(s) + ", not seq " +
                         std::to_string(seq) + " (an earlier operation's, delivered again)";
          break;
        }
      }
    }
  }
  if (coverage_ == Coverage::kSampled) {
    const size_t elem = dtypeSize(dtype_);
    for (const Range& r : rs) {
      std::memset(static_cast<char*>(data) + r.begin * elem, 0, (r.end - r.begin) * elem);
    }
    if (mirror_.store) mirror_.store(rs.span());
  }
  return out;
}

std::string TrafficCheck::identify(const void* data, int sender, uint64_t expected,
                                   std::optional<uint64_t>* found_seq) const {
  const std::string want = "seq " + std::to_string(expected);
  const uint64_t lo = expected > kNear ? expected - kNear : 0;
  for (uint64_t s = lo; s <= expected + kNear; ++s) {
    if (s == expected || !holds(data, key(sender, s))) continue;
    *found_seq = s;
    if (s < expected) {
      return "the content of its seq " + std::to_string(s) + ", not " + want +
             " (an earlier operation's, delivered again)";
    }
    return "the content of its seq " + std::to_string(s) + ", not " + want + " (seq " +
           std::to_string(expected) + (s == expected + 1 ? "" : " to " + std::to_string(s - 1)) +
           " missing)";
  }
  if (previous_nonce_ != 0) {
    const uint64_t plo = previous_last_ > 2 * kNear ? previous_last_ - 2 * kNear : 0;
    for (uint64_t s = plo; s <= previous_last_; ++s) {
      if (holds(data, ContentKey{previous_nonce_, sender, s})) {
        return "the content of its seq " + std::to_string(s) +
               " of the world's previous incarnation, not " + want + " of this one";
      }
    }
  }
  const bool whole = regions(expected).elements() == count_;
  return std::string(whole ? "every element" : "every checked element") +
         " wrong, and not the content of any of its operations near " + want;
}

}  // namespace mw::chaos
