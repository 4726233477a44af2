// Communicator: tensor operations inside one world, addressed by world name.
//
// Every operation returns a Work at once. Arguments are validated before anything is sent: a bad
// rank, a tensor on the wrong device, a null pointer or a size that does not fit completes the Work
// with kInvalidArgument naming the argument; an unknown world with kNotFound; a world that is not
// healthy with kWorldBroken (or kInvalidUsage while joining). Each operation has a deadline of the
// world's op_timeout from submission; passing it breaks the world.
//
// Every member of a world must call collectives in the same order with matching dtype, count,
// root and reduce op. A member whose arguments do not match its peers' breaks the world with cause
// kProtocolError and a detail naming both calls, never corrupting data or crashing: at once for
// point-to-point messages and most collectives, and at the operation's deadline for all_reduce on
// float32, float64, int32 and int64 (which runs Gloo's own, faster ring; see docs/design.md).
// Point-to-point messages match by (source, tag) in order; dtype and count must match too.
//
// Tensors are borrowed: keep each buffer alive and unmodified until its Work completes.
// Thread rules: any thread. Operations of one world execute in submission order.
#pragma once

#include <string>

#include "multiworld/status.h"
#include "multiworld/tensor.h"
#include "multiworld/work.h"
#include "multiworld/world_manager.h"

namespace mw {

class Communicator {
 public:
  // REQUIRES: `manager` outlives the communicator.
  explicit Communicator(WorldManager& manager) : manager_(manager) {}

  // Point to point. tag: 0 .. 2^31-1.
  Work isend(const std::string& world, const Tensor& t, int dst, int tag = 0);
  Work irecv(const std::string& world, const Tensor& t, int src, int tag = 0);
  // Blocking forms: isend/irecv then wait (bounded by the world's op deadline).
  Status send(const std::string& world, const Tensor& t, int dst, int tag = 0);
  Status recv(const std::string& world, const Tensor& t, int src, int tag = 0);

  // Collectives. In-place where one tensor is given.
  Work broadcast(const std::string& world, const Tensor& t, int root);
  Work allReduce(const std::string& world, const Tensor& t, ReduceOp op = ReduceOp::kSum);
  // The result lands in `t` at `root`; other ranks' `t` is used as scratch and left undefined.
  Work reduce(const std::string& world, const Tensor& t, int root, ReduceOp op = ReduceOp::kSum);
  // out.count == in.count * size; rank i's `in` lands in block i of `out`.
  Work allGather(const std::string& world, const Tensor& in, const Tensor& out);
  // At root out.count == in.count * size; other ranks may pass an empty `out`.
  Work gather(const std::string& world, const Tensor& in, const Tensor& out, int root);
  // At root in.count == out.count * size; other ranks may pass an empty `in`.
  Work scatter(const std::string& world, const Tensor& in, const Tensor& out, int root);
  // in.count == out.count * size; block i of the reduced `in` lands in rank i's `out`.
  Work reduceScatter(const std::string& world, const Tensor& in, const Tensor& out,
                     ReduceOp op = ReduceOp::kSum);
  // in.count == out.count == block * size; block j of rank i's `in` lands in block i of rank j's
  // `out`.
  Work allToAll(const std::string& world, const Tensor& in, const Tensor& out);
  Work barrier(const std::string& world);

 private:
  WorldManager& manager_;
};

}  // namespace mw
