// Communicator: tensor operations inside one world, addressed by world name.
//
// Every operation returns a Work at once. Arguments are validated before anything is sent: a bad
// rank, a tensor on the wrong device, a null pointer or a size that does not fit completes the Work
// with kInvalidArgument naming the argument; an unknown world with kNotFound; a world that is not
// healthy with kWorldBroken (or kInvalidUsage while joining). Each operation has a deadline of the
// world's op_timeout from submission; passing it breaks the world.
//
// Matching rule (what pairs one member's call with its peers'):
// - Collectives match by their order among the world's collectives: the n-th collective a member
//   submits to a world meets the n-th of every other member, whatever point-to-point traffic runs
//   beside them. Every member must call them in the same order with matching dtype, count, root and
//   reduce op. Several threads of one member may submit collectives to one world only if they
//   agree on an order (their submissions interleave as they happen).
// - Point-to-point messages match by (peer, tag): the n-th isend to a peer on a tag meets that
//   peer's n-th irecv from us on that tag; dtype and count must match too. They never wait behind
//   a collective, and no collective waits behind them: threads may stream isend/irecv on a world
//   while other threads run collectives on it (Gloo worlds; NCCL worlds: see docs/design.md).
// A member whose arguments do not match its peers' breaks the world with cause kProtocolError and a
// detail naming both calls, never corrupting data or crashing: within about a second (the
// operation that stalls is compared with its peers' through the store), or at the operation's
// deadline for all_reduce on float32, float64, int32 and int64 (Gloo's own ring; docs/design.md).
//
// Tensors are borrowed: keep each buffer alive and unmodified until its Work completes.
// Thread rules: any thread. A world's collectives run one at a time in submission order; its
// point-to-point operations complete as their data arrives, in any order across (peer, tag).
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
  // Blocking forms: isend/irecv then synchronize (the host waits, on nccl worlds too; bounded by
  // the world's op deadline).
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
