// The join barrier's keys (docs/design.md, "A world's life", step 5; docs/store-protocol.md,
// "The join barrier"). The members write them through their key-value clients (worlds/world.cc);
// the store writes kJoinOpen itself when a member is lost while the barrier is still shut
// (store_membership.cc).
#pragma once

#include <string>
#include <string_view>

namespace mw::store {

// Counted up by each member once its backend is connected (ADD 1).
inline constexpr std::string_view kJoinConnected = "mw/join/connected";
// Set by the last member counted in: kJoinOpenValue. Set by the store instead, when a member is
// lost after the first count and before the opening: kJoinLostPrefix + "rank R <cause>: <detail>".
// The first of the two wins (the last member in opens with COMPARE_SET, expecting it absent).
inline constexpr std::string_view kJoinOpen = "mw/join/open";
inline constexpr std::string_view kJoinOpenValue = "1";
inline constexpr std::string_view kJoinLostPrefix = "lost: ";
// Set to "1" by each member but rank 0 once past the opening: kJoinThroughPrefix + its rank
// (joinThroughKey). Rank 0 waits for all of them. The store sets a member's key itself
// (kJoinLostPrefix + "rank R <cause>: <detail>") when that member is lost after the opening with
// its key unset: it may never set it now, and its loss is announced as a formed world's. One key
// per member, not a count: a member that went after setting its own is never counted twice.
inline constexpr std::string_view kJoinThroughPrefix = "mw/join/through/";
inline std::string joinThroughKey(int rank) {
  return std::string(kJoinThroughPrefix) + std::to_string(rank);
}

}  // namespace mw::store
