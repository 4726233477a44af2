#include "nccl/nccl_ops.h"

#include "nccl/nccl_loader.h"

namespace mw::detail {

namespace {

const char* ncclName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult";
  }
}

ncclDataType_t ncclType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kUInt8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// Runs `body` inside one NCCL group; the group is closed even when a call inside fails.
template <typename Body>
ncclResult_t grouped(Body&& body) {
  if (ncclResult_t r = ncclApi().ncclGroupStart(); r != ncclSuccess) return r;
  ncclResult_t inner = body();
  ncclResult_t end = ncclApi().ncclGroupEnd();
  return inner != ncclSuccess ? inner : end;
}

// gather and scatter as point-to-point messages in one group (the root's own block included,
// which NCCL allows within a group); every NCCL version with non-blocking communicators has them.
ncclResult_t rooted(const OpRequest& op, const NcclTarget& t) {
  const NcclApi& api_ = ncclApi();
  const ncclComm_t comm_ = t.comm;
  const cudaStream_t stream_ = t.stream;
  const bool gather = op.kind == OpKind::kGather;
  const Tensor& block = gather ? op.in : op.out;
  const size_t bytes = block.bytes();
  const ncclDataType_t dt = ncclType(block.dtype);
  const int root = op.peer;
  return grouped([&]() -> ncclResult_t {
    if (gather) {
      ncclResult_t r = api_.ncclSend(op.in.data, op.in.count, dt, root, comm_, stream_);
      if (r != ncclSuccess || t.rank != root) return r;
      for (int i = 0; i < t.size && r == ncclSuccess; ++i) {
        r = api_.ncclRecv(static_cast<char*>(op.out.data) + bytes * i, block.count, dt, i, comm_,
                          stream_);
      }
      return r;
    }
    ncclResult_t r = ncclSuccess;
    if (t.rank == root) {
      for (int i = 0; i < t.size && r == ncclSuccess; ++i) {
        r = api_.ncclSend(static_cast<const char*>(op.in.data) + bytes * i, block.count, dt, i,
                          comm_, stream_);
      }
    }
    return r != ncclSuccess ? r
                            : api_.ncclRecv(op.out.data, op.out.count, dt, root, comm_, stream_);
  });
}

ncclResult_t allToAll(const OpRequest& op, const NcclTarget& t) {
  const NcclApi& api_ = ncclApi();
  const ncclComm_t comm_ = t.comm;
  const cudaStream_t stream_ = t.stream;
  const size_t count = op.in.count / static_cast<size_t>(t.size);
  const size_t bytes = count * dtypeSize(op.in.dtype);
  const ncclDataType_t dt = ncclType(op.in.dtype);
  return grouped([&]() -> ncclResult_t {
    ncclResult_t r = ncclSuccess;
    for (int j = 0; j < t.size && r == ncclSuccess; ++j) {
      r = api_.ncclSend(static_cast<const char*>(op.in.data) + bytes * j, count, dt, j, comm_,
                        stream_);
      if (r == ncclSuccess) {
        r = api_.ncclRecv(static_cast<char*>(op.out.data) + bytes * j, count, dt, j, comm_,
                          stream_);
      }
    }
    return r;
  });
}

}  // namespace

std::string cudaText(cudaError_t e) {
  return std::string(ncclApi().cudaGetErrorName(e)) + " (" + ncclApi().cudaGetErrorString(e) + ")";
}

std::string ncclText(ncclResult_t r) {
  return std::string(ncclName(r)) + " " + std::to_string(static_cast<int>(r)) + " (" +
         ncclApi().ncclGetErrorString(r) + ")";
}

ncclResult_t enqueueOp(const OpRequest& op, const NcclTarget& t) {
  const NcclApi& api_ = ncclApi();
  const ncclComm_t comm_ = t.comm;
  const cudaStream_t stream_ = t.stream;
  void* d = op.in.data;
  const size_t n = op.in.count;
  const ncclDataType_t dt = ncclType(op.in.dtype);
  switch (op.kind) {
    case OpKind::kSend:
      return api_.ncclSend(d, n, dt, op.peer, comm_, stream_);
    case OpKind::kRecv:
      return api_.ncclRecv(d, n, dt, op.peer, comm_, stream_);
    case OpKind::kBroadcast:
      return api_.ncclBroadcast(d, d, n, dt, op.peer, comm_, stream_);
    case OpKind::kAllReduce:
      return api_.ncclAllReduce(d, d, n, dt, ncclOp(op.reduce), comm_, stream_);
    case OpKind::kReduce:
      return api_.ncclReduce(d, d, n, dt, ncclOp(op.reduce), op.peer, comm_, stream_);
    case OpKind::kAllGather:
      return api_.ncclAllGather(d, op.out.data, n, dt, comm_, stream_);
    case OpKind::kReduceScatter:
      return api_.ncclReduceScatter(d, op.out.data, op.out.count, dt, ncclOp(op.reduce), comm_,
                                    stream_);
    case OpKind::kGather:
    case OpKind::kScatter:
      return rooted(op, t);
    case OpKind::kAllToAll:
      return allToAll(op, t);
    case OpKind::kBarrier:
      return api_.ncclAllReduce(t.scratch, t.scratch, 1, ncclInt32, ncclSum, comm_, stream_);
  }
  return ncclInvalidUsage;
}

}  // namespace mw::detail
