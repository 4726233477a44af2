// The join barrier's keys (docs/design.md, "A world's life", step 5; docs/store-protocol.md,
// "The join barrier"). The members write them through their key-value clients (worlds/world.cc);
// the store writes kJoinOpen itself when a member is lost while the barrier is still shut
// (store_membership.cc).
#pragma once

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
// Counted up by each member but rank 0 once past the opening; the last sets kJoinThrough. The
// store sets kJoinThrough itself (kJoinLostPrefix + "rank R <cause>: <detail>") when a member is
// lost after the opening, before it is set: that member may never count itself through, and its
// loss is then announced as a formed world's.
inline constexpr std::string_view kJoinThroughCount = "mw/join/through_count";
inline constexpr std::string_view kJoinThrough = "mw/join/through";

}  // namespace mw::store
