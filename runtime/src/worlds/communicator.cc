#include "multiworld/communicator.h"

#include <algorithm>

#include "backend/backend.h"
#include "backend/work_state.h"
#include "multiworld/cuda_stream.h"
#include "worlds/manager_impl.h"
#include "worlds/telemetry.h"

namespace mw {

namespace detail {

const char* opKindName(OpKind k) {
  switch (k) {
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kBarrier:
      return "barrier";
  }
  return "unknown";
}

}  // namespace detail

namespace {

using detail::OpKind;
using detail::OpRequest;

// Checks one operation against its world; returns OK or a kInvalidArgument naming the problem.
class Checker {
 public:
  Checker(const detail::World& w, OpKind kind)
      : rank_(w.options().rank),
        size_(w.options().size),
        device_(w.options().device),
        backend_(backendName(w.options().backend)),
        kind_(kind),
        world_(w.options().name) {}

  Status tensor(const char* name, const Tensor& t, bool may_be_empty = false) const {
    if (may_be_empty && t.count == 0) return Status::Ok();
    if (t.device != device_) {
      return bad(std::string(name) + " is on " + t.device.str() + " but this world (" + backend_ +
                 ") is on " + device_.str());
    }
    if (t.data == nullptr && t.count > 0)
      return bad(std::string(name) + " has a null data pointer");
    if (static_cast<int>(t.dtype) >= kNumDTypes)
      return bad(std::string(name) + " has an unknown dtype");
    if (t.count > kMaxTensorBytes / dtypeSize(t.dtype)) {
      return bad(std::string(name) + " has " + std::to_string(t.count) + " elements of " +
                 dtypeName(t.dtype) + ": more than " + std::to_string(kMaxTensorBytes) + " bytes");
    }
    return Status::Ok();
  }
  Status peer(const char* what, int r, bool allow_self) const {
    if (r < 0 || r >= size_) {
      return bad(std::string(what) + " " + std::to_string(r) + " is out of range for size " +
                 std::to_string(size_));
    }
    if (!allow_self && r == rank_) return bad(std::string(what) + " is this rank itself");
    return Status::Ok();
  }
  Status counts(const Tensor& small, const char* sn, const Tensor& big, const char* bn) const {
    if (small.dtype != big.dtype) {
      return bad(std::string(sn) + " is " + dtypeName(small.dtype) + " but " + bn + " is " +
                 dtypeName(big.dtype));
    }
    if (small.count > big.count / static_cast<size_t>(size_) ||
        big.count != small.count * static_cast<size_t>(size_)) {
      return bad(std::string(bn) + " has " + std::to_string(big.count) + " elements; it needs " +
                 std::string(sn) + "'s " + std::to_string(small.count) + " x size " +
                 std::to_string(size_));
    }
    return Status::Ok();
  }
  // The message is made only for a bad argument: a good call builds no string.
  Status bad(const std::string& what) const {
    return Status(Code::kInvalidArgument,
                  std::string(detail::opKindName(kind_)) + " in world '" + world_ + "': " + what);
  }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_;
  int size_;
  Device device_;
  const char* backend_;
  OpKind kind_;
  const std::string& world_;  // the world's options outlive the check
};

bool reduces(OpKind k) {
  return k == OpKind::kAllReduce || k == OpKind::kReduce || k == OpKind::kReduceScatter;
}

Status validate(const OpRequest& op, const Checker& c) {
  if (reduces(op.kind) && static_cast<int>(op.reduce) > static_cast<int>(ReduceOp::kMax)) {
    return c.bad("reduce op " + std::to_string(static_cast<int>(op.reduce)) +
                 " is not one of sum, prod, min, max");
  }
  switch (op.kind) {
    case OpKind::kSend:
    case OpKind::kRecv:
      if (op.tag < 0) return c.bad("tag " + std::to_string(op.tag) + " is negative");
      MW_RETURN_IF_ERROR(c.peer(op.kind == OpKind::kSend ? "dst" : "src", op.peer, false));
      return c.tensor("tensor", op.in);
    case OpKind::kBroadcast:
    case OpKind::kReduce:
      MW_RETURN_IF_ERROR(c.peer("root", op.peer, true));
      return c.tensor("tensor", op.in);
    case OpKind::kAllReduce:
      return c.tensor("tensor", op.in);
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
      MW_RETURN_IF_ERROR(c.tensor("in", op.in));
      MW_RETURN_IF_ERROR(c.tensor("out", op.out));
      return op.kind == OpKind::kAllGather ? c.counts(op.in, "in", op.out, "out")
                                           : c.counts(op.out, "out", op.in, "in");
    case OpKind::kGather:
    case OpKind::kScatter: {
      const bool gather = op.kind == OpKind::kGather;
      MW_RETURN_IF_ERROR(c.peer("root", op.peer, true));
      const Tensor& block = gather ? op.in : op.out;
      const Tensor& whole = gather ? op.out : op.in;
      MW_RETURN_IF_ERROR(c.tensor(gather ? "in" : "out", block));
      if (c.rank() != op.peer) return Status::Ok();
      MW_RETURN_IF_ERROR(c.tensor(gather ? "out" : "in", whole));
      return c.counts(block, gather ? "in" : "out", whole, gather ? "out" : "in");
    }
    case OpKind::kAllToAll:
      MW_RETURN_IF_ERROR(c.tensor("in", op.in));
      MW_RETURN_IF_ERROR(c.tensor("out", op.out));
      if (op.in.dtype != op.out.dtype || op.in.count != op.out.count) {
        return c.bad("in and out must have the same dtype and count");
      }
      if (op.in.count % static_cast<size_t>(c.size()) != 0) {
        return c.bad("count " + std::to_string(op.in.count) + " is not a multiple of size " +
                     std::to_string(c.size()));
      }
      return Status::Ok();
    case OpKind::kBarrier:
      return Status::Ok();
  }
  return c.bad("unknown operation");
}

Work submit(WorldManager& m, const std::string& world, OpRequest op, bool caller_waits = false) {
  auto w = detail::ManagerAccess::impl(m).find(world);
  if (!w) return Work::done(world, Status(Code::kNotFound, "no world named '" + world + "'"));
  if (w->state() != WorldState::kHealthy) return Work::done(world, w->notHealthyStatus());
  Status s = validate(op, Checker(*w, op.kind));
  if (!s.ok()) return Work::done(world, s);
  op.deadline = deadlineIn(w->options().op_timeout);
  op.stream = currentCudaStream();
  op.work = std::make_shared<detail::WorkState>(world);
  if (w->counters) {
    op.work->counters = w->counters;
    op.work->bytes = static_cast<int64_t>(std::max(op.in.bytes(), op.out.bytes()));
    op.work->submitted = Clock::now();
  }
  Work handle = detail::WorkAccess::make(op.work);
  w->submit(std::move(op), caller_waits);
  return handle;
}

OpRequest request(OpKind kind, const Tensor& in, const Tensor& out = {}, int peer = -1, int tag = 0,
                  ReduceOp reduce = ReduceOp::kSum) {
  OpRequest r;
  r.kind = kind;
  r.in = in;
  r.out = out;
  r.peer = peer;
  r.tag = tag;
  r.reduce = reduce;
  return r;
}

}  // namespace

namespace {
thread_local void* current_stream = nullptr;
}  // namespace

CudaStreamScope::CudaStreamScope(void* stream) noexcept : previous_(current_stream) {
  current_stream = stream;
}

CudaStreamScope::~CudaStreamScope() { current_stream = previous_; }

void* currentCudaStream() noexcept { return current_stream; }

Work Communicator::isend(const std::string& world, const Tensor& t, int dst, int tag) {
  return submit(manager_, world, request(OpKind::kSend, t, {}, dst, tag));
}

Work Communicator::irecv(const std::string& world, const Tensor& t, int src, int tag) {
  return submit(manager_, world, request(OpKind::kRecv, t, {}, src, tag));
}

Status Communicator::send(const std::string& world, const Tensor& t, int dst, int tag) {
  return submit(manager_, world, request(OpKind::kSend, t, {}, dst, tag), true).synchronize();
}

Status Communicator::recv(const std::string& world, const Tensor& t, int src, int tag) {
  return submit(manager_, world, request(OpKind::kRecv, t, {}, src, tag), true).synchronize();
}

Work Communicator::broadcast(const std::string& world, const Tensor& t, int root) {
  return submit(manager_, world, request(OpKind::kBroadcast, t, {}, root));
}

Work Communicator::allReduce(const std::string& world, const Tensor& t, ReduceOp op) {
  return submit(manager_, world, request(OpKind::kAllReduce, t, {}, -1, 0, op));
}

Work Communicator::reduce(const std::string& world, const Tensor& t, int root, ReduceOp op) {
  return submit(manager_, world, request(OpKind::kReduce, t, {}, root, 0, op));
}

Work Communicator::allGather(const std::string& world, const Tensor& in, const Tensor& out) {
  return submit(manager_, world, request(OpKind::kAllGather, in, out));
}

Work Communicator::gather(const std::string& world, const Tensor& in, const Tensor& out, int root) {
  return submit(manager_, world, request(OpKind::kGather, in, out, root));
}

Work Communicator::scatter(const std::string& world, const Tensor& in, const Tensor& out,
                           int root) {
  return submit(manager_, world, request(OpKind::kScatter, in, out, root));
}

Work Communicator::reduceScatter(const std::string& world, const Tensor& in, const Tensor& out,
                                 ReduceOp op) {
  return submit(manager_, world, request(OpKind::kReduceScatter, in, out, -1, 0, op));
}

Work Communicator::allToAll(const std::string& world, const Tensor& in, const Tensor& out) {
  return submit(manager_, world, request(OpKind::kAllToAll, in, out));
}

Work Communicator::barrier(const std::string& world) {
  return submit(manager_, world, request(OpKind::kBarrier, Tensor{}));
}

}  // namespace mw
