#include "nccl/nccl_resources.h"

#include <map>
#include <system_error>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/thread_name.h"
#include "nccl/nccl_backend.h"
#include "nccl/nccl_loader.h"

namespace mw::detail {

namespace {

// The aborts in flight. Never destroyed: a static WorldManager, or a detached abort thread, may
// use it after every other static is gone.
struct AbortCount {
  Mutex mu;
  std::condition_variable cv;
  int running MW_GUARDED_BY(mu) = 0;

  void add() MW_EXCLUDES(mu) {
    MutexLock lock(mu);
    ++running;
  }
  void done() MW_EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      MW_CHECK(running > 0);  // each done() follows its add()
      --running;
    }
    cv.notify_all();
  }
};
AbortCount& abortCount() {
  static auto* c = new AbortCount;
  return *c;
}

void runAbort(const std::shared_ptr<AbortTicket>& ticket, ncclComm_t comm, int device) {
  ncclApi().cudaSetDevice(device);
  ncclApi().ncclCommAbort(comm);  // its result changes nothing: the communicator is gone
  ticket->finish();
  abortCount().done();
}

constexpr size_t kScratchChunk = 256;  // slots per cudaMalloc

struct ScratchPool {
  Mutex mu;
  std::map<int, std::vector<int*>> free MW_GUARDED_BY(mu);  // by device
};
ScratchPool& scratchPool() {
  static auto* p = new ScratchPool;  // never freed: its memory outlives every world
  return *p;
}

}  // namespace

AbortCounted::AbortCounted(bool counts) : counts_(counts) {
  if (counts_) abortCount().add();
}

AbortCounted::~AbortCounted() {
  if (counts_) abortCount().done();
}

bool AbortTicket::waitUntil(Clock::time_point until) {
  MutexLock lock(mu_);
  return cv_.wait_until(lock.native(), until, [&]() MW_REQUIRES(mu_) { return done_; });
}

void AbortTicket::finish() {
  {
    MutexLock lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

std::shared_ptr<AbortTicket> startAbort(ncclComm_t comm, int device) {
  auto ticket = std::make_shared<AbortTicket>();
  abortCount().add();
  try {
    std::thread([ticket, comm, device] {
      nameThisThread("mw-nccl-abort");
      runAbort(ticket, comm, device);
    }).detach();
  } catch (const std::system_error&) {
    runAbort(ticket, comm, device);  // no thread to be had: abort here rather than never
  }
  return ticket;
}

bool waitForNcclAborts(Deadline deadline) {
  AbortCount& c = abortCount();
  MutexLock lock(c.mu);
  return c.cv.wait_until(lock.native(), deadline,
                         [&]() MW_REQUIRES(c.mu) { return c.running == 0; });
}

int ncclAbortsInFlight() {
  MutexLock lock(abortCount().mu);
  return abortCount().running;
}

Result<int*> takeScratch(int device) {
  ScratchPool& pool = scratchPool();
  MutexLock lock(pool.mu);
  std::vector<int*>& slots = pool.free[device];
  if (slots.empty()) {
    int* chunk = nullptr;
    cudaError_t e =
        ncclApi().cudaMalloc(reinterpret_cast<void**>(&chunk), sizeof(int) * kScratchChunk);
    if (e != cudaSuccess) {
      ncclApi().cudaGetLastError();
      return Status(Code::kBackendError, std::string("cudaMalloc of its barrier's memory: ") +
                                             ncclApi().cudaGetErrorName(e));
    }
    for (size_t i = 0; i < kScratchChunk; ++i) slots.push_back(chunk + i);
  }
  int* slot = slots.back();
  slots.pop_back();
  return slot;
}

void giveScratch(int device, int* slot) {
  if (slot == nullptr) return;
  MutexLock lock(scratchPool().mu);
  scratchPool().free[device].push_back(slot);
}

}  // namespace mw::detail
