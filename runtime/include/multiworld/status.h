// Status and Result: the error model of libmultiworld.
//
// Every fallible call returns a [[nodiscard]] Status or Result<T>. Codes are stable and meant to be
// switched on; the message is for people. A WorldBroken status also carries which world broke, why
// and when the break was detected (BrokenInfo).
//
// Thread rules: Status and Result are values; copies may be used from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace mw {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Returns the deadline `d` from now. Negative durations give a deadline in the past. Saturates:
// a duration past the clock's range gives Deadline::max() (never) or Deadline::min() (already
// past), never a wrapped time.
inline Deadline deadlineIn(Clock::duration d) {
  Clock::rep at = 0;
  if (__builtin_add_overflow(Clock::now().time_since_epoch().count(), d.count(), &at)) {
    return d.count() > 0 ? Deadline::max() : Deadline::min();
  }
  return Deadline(Clock::duration(at));
}

// The time from now until `d`, negative once it has passed; saturates as deadlineIn does
// (Deadline::min() is simply long past, Deadline::max() never comes).
inline Clock::duration timeUntil(Deadline d) {
  Clock::rep left = 0;
  const Clock::rep now = Clock::now().time_since_epoch().count();
  if (__builtin_sub_overflow(d.time_since_epoch().count(), now, &left)) {
    return d.time_since_epoch().count() > now ? Clock::duration::max() : Clock::duration::min();
  }
  return Clock::duration(left);
}

// `d` in whole milliseconds, rounded up and never negative: a wait of that long (poll(2) and most
// timeouts take whole milliseconds) does not end before `d` has passed. Rounded down, the last
// fraction of a millisecond would be a timeout of 0, and a loop around the wait would spin.
inline std::chrono::milliseconds waitMillis(Clock::duration d) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(d);
  return ms.count() < 0 ? std::chrono::milliseconds(0) : ms;
}

// Milliseconds left until `d`, rounded up (see waitMillis), never negative.
inline std::chrono::milliseconds remaining(Deadline d) { return waitMillis(timeUntil(d)); }

enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,    // the caller passed something wrong (rank out of range, bad dtype...)
  kInvalidUsage = 2,       // the call is not allowed in this state (world exists, not joined...)
  kNotFound = 3,           // unknown world, missing key
  kTimeout = 4,            // a deadline passed before the call could complete
  kRemoteError = 5,        // a peer reported an error or sent something invalid
  kWorldBroken = 6,        // the world failed; BrokenInfo says why
  kAborted = 7,            // the operation was cancelled locally (world removed, shutdown)
  kBackendError = 8,       // the communication library failed (Gloo, NCCL)
  kIoError = 9,            // a socket or file failed
  kPermissionDenied = 10,  // wrong store token
  kUnavailable = 11,       // something needed is missing on this machine (no GPU, no NCCL build)
};

// Stable lowercase name of a code, e.g. "world_broken".
const char* codeName(Code code);

// Why a world broke.
enum class Cause : int {
  kNone = 0,
  kPeerDied = 1,       // a member's connection closed (process exit, SIGKILL, reset)
  kPeerSilent = 2,     // no heartbeat from a member for longer than the world's heartbeat timeout
  kOpTimeout = 3,      // an operation passed its deadline
  kBackendError = 4,   // Gloo/NCCL reported an error
  kStoreLost = 5,      // reserved: the world's store answered garbage
  kProtocolError = 6,  // a peer violated the protocol (dtype/count mismatch, bad frame)
  kInjected = 7,       // reserved: a failpoint fired (failpoint builds, next release)
  kRemoteBroken = 8,   // another member reported that the world broke there
  kPeerLeft = 9,       // a member left the world (removeWorld, or its manager was destroyed)
};

const char* causeName(Cause cause);

// Details attached to every kWorldBroken status and world event.
struct BrokenInfo {
  std::string world;
  Cause cause = Cause::kNone;
  int peer_rank = -1;               // the member blamed, or -1 when none is known
  std::string detail;               // human readable
  Clock::time_point detected_at{};  // monotonic time the break was detected in this process
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status worldBroken(const BrokenInfo& info);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // Present only for kWorldBroken.
  const std::optional<BrokenInfo>& broken() const { return broken_; }

  // "<code>: <message>" or "ok".
  std::string toString() const;

  // Marks a status as deliberately unused.
  void ignore() const {}

 private:
  Code code_ = Code::kOk;
  std::string message_;
  std::optional<BrokenInfo> broken_;
};

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInvalidUsage, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  // Returns OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

// The cause named `name` as causeName prints it; kInvalidArgument for any other name.
Result<Cause> parseCause(std::string_view name);

}  // namespace mw

// Returns early from the enclosing function with the status of `expr` when it is not OK.
#define MW_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::mw::Status mw_status_ = (expr);        \
    if (!mw_status_.ok()) return mw_status_; \
  } while (0)
