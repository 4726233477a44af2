#include "multiworld/work.h"

#include <algorithm>

#include "backend/work_state.h"
#include "multiworld/cuda_stream.h"
#include "worlds/telemetry.h"

namespace mw {
namespace detail {

bool WorkState::complete(Status s) {
  std::vector<AnyWaiter*> waiters;
  const bool counted = counters != nullptr && s.ok();
  {
    MutexLock lock(mu);
    if (done) return false;
    done = true;
    status = std::move(s);
    waiters = any_waiters;
    // Notify while holding mu: a waitAny call unregisters under mu before its AnyWaiter dies, so
    // every pointer in `waiters` is alive until we release it.
    for (AnyWaiter* w : waiters) {
      MutexLock wl(w->mu);
      w->fired = true;
      w->cv.notify_all();
    }
  }
  cv.notify_all();
  if (counted) {
    const Clock::time_point now = Clock::now();
    counters->add(now, bytes,
                  std::chrono::duration_cast<std::chrono::nanoseconds>(now - submitted).count());
  }
  return true;
}

void WorkState::markLaunched(void* done_event) {
  {
    MutexLock lock(mu);
    gpu_done = done_event;
    launched = true;
  }
  cv.notify_all();
}

bool WorkState::isDone() const {
  MutexLock lock(mu);
  return done;
}

void WorkState::expediteOnce() {
  if (expedited.exchange(true) || isDone()) return;
  if (auto d = driver.lock()) d->expedite(this);
}

}  // namespace detail

namespace {
const std::string kNoWorld;
}

Work Work::done(const std::string& world, Status status) {
  auto state = std::make_shared<detail::WorkState>(world);
  state->complete(std::move(status));
  return detail::WorkAccess::make(std::move(state));
}

Status Work::wait(Deadline deadline) const {
  if (!state_) return Status(Code::kInvalidUsage, "wait() on an empty Work");
  if (!state_->isDone()) {
    if (auto d = state_->driver.lock()) {
      if (auto ordered = d->orderStream(state_.get(), currentCudaStream(), deadline)) {
        return *ordered;
      }
    }
  }
  return synchronize(deadline);
}

Status Work::synchronize(Deadline deadline) const {
  if (!state_) return Status(Code::kInvalidUsage, "synchronize() on an empty Work");
  if (!state_->isDone()) {
    if (auto d = state_->driver.lock()) d->driveUntil(state_.get(), deadline);
  }
  MutexLock lock(state_->mu);
  if (!state_->cv.wait_until(lock.native(), deadline,
                             [&]() MW_REQUIRES(state_->mu) { return state_->done; })) {
    return Status(Code::kTimeout, "operation in world '" + state_->world +
                                      "' did not complete before the caller's deadline");
  }
  return state_->status;
}

bool Work::test() const {
  if (!state_) return false;
  if (state_->isDone()) return true;
  state_->expediteOnce();  // somebody is waiting for it: start it now
  return false;
}

Status Work::status() const {
  if (!state_) return Status(Code::kInvalidUsage, "status() on an empty Work");
  MutexLock lock(state_->mu);
  if (!state_->done) return Status(Code::kInvalidUsage, "operation not complete");
  return state_->status;
}

const std::string& Work::world() const { return state_ ? state_->world : kNoWorld; }

namespace {

std::optional<size_t> firstDone(std::span<const Work> works) {
  for (size_t i = 0; i < works.size(); ++i) {
    if (works[i].test()) return i;
  }
  return std::nullopt;
}

void setWaiter(std::span<const Work> works, detail::AnyWaiter* waiter, bool add) {
  for (const Work& w : works) {
    auto& st = *detail::WorkAccess::state(w);
    MutexLock lock(st.mu);
    auto& v = st.any_waiters;
    if (add) {
      v.push_back(waiter);
    } else {
      v.erase(std::remove(v.begin(), v.end(), waiter), v.end());
    }
  }
}

}  // namespace

Result<size_t> waitAny(std::span<const Work> works, Deadline deadline) {
  if (works.empty()) return Status(Code::kInvalidArgument, "waitAny: no works given");
  for (size_t i = 0; i < works.size(); ++i) {
    if (!works[i].valid()) {
      return Status(Code::kInvalidArgument, "waitAny: work " + std::to_string(i) + " is empty");
    }
  }
  for (const Work& w : works) detail::WorkAccess::state(w)->expediteOnce();
  detail::AnyWaiter waiter;
  setWaiter(works, &waiter, true);
  // A work that completed before registration never fires the waiter: look once more first.
  if (!firstDone(works)) {
    MutexLock lock(waiter.mu);
    waiter.cv.wait_until(lock.native(), deadline,
                         [&]() MW_REQUIRES(waiter.mu) { return waiter.fired; });
  }
  setWaiter(works, &waiter, false);
  if (auto i = firstDone(works)) return *i;
  return Status(Code::kTimeout, "waitAny: none of " + std::to_string(works.size()) +
                                    " operations completed before the deadline");
}

}  // namespace mw
