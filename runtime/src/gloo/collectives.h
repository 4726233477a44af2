// CPU collectives over Gloo unbound buffers, cancellable through the Channel.
//
// Every message of an operation travels on slots derived from the operation's descriptor (kind,
// dtype, count, root, reduce op) and a per-world sequence number, so members whose calls disagree
// never match each other's messages (Gloo would abort the process on a size overflow); a
// descriptor exchange with the ring neighbour turns such a disagreement into a ProtocolError that
// names both calls.
//
// all_reduce on float32, float64, int32 and int64 runs Gloo's own ring algorithm (measured 1.7x
// faster than ours on these machines), after a blocking descriptor check with the neighbour it
// receives from, so that no member ever sees a message larger than the buffer Gloo posted for it.
// Gloo's internal buffers cannot be reached by abortWaitRecv/abortWaitSend: an abort cuts the
// world's sockets instead (see pair_sockets.h), which fails Gloo's waits at once.
#pragma once

#include <gloo/context.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "gloo/channel.h"

namespace mw::detail {

struct CollectiveEnv {
  std::shared_ptr<gloo::Context> context;  // for Gloo's own algorithms
  int rank = 0;
  int size = 1;
  uint64_t seq = 0;  // per world, increments per collective, same on every member
  Channel* channel = nullptr;
  std::vector<char>* scratch = nullptr;  // reusable receive space
  std::vector<char>* work = nullptr;     // reusable copy space
};

// One collective operation (not send/recv). It owns every buffer it posts and the small messages
// (descriptors, barrier tokens) those buffers point to, so it must outlive Gloo's use of them:
// destroy it only after run() returned, or, after a failure, once the world's connections are
// closed (Gloo's loop may still be writing from or into them until then). `op` must outlive it.
class Collective {
 public:
  Collective(const OpRequest& op, const CollectiveEnv& env);
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;
  // Runs the operation to completion. Throws AbortedError, OpTimeoutError, ProtocolError or
  // Gloo's exceptions. Call at most once.
  void run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Point-to-point header, sent ahead of each message so the receiver can name a mismatch.
struct P2PHeader {
  uint32_t magic = 0;
  uint8_t dtype = 0;
  uint8_t pad[3] = {0, 0, 0};
  int32_t tag = 0;
  uint32_t pad2 = 0;
  uint64_t count = 0;
};
static_assert(sizeof(P2PHeader) == 24, "P2PHeader is a wire format: no implicit padding");

inline constexpr uint32_t kP2PMagic = 0x4d575032;  // "MWP2"

uint64_t p2pHeaderSlot(int tag);
uint64_t p2pDataSlot(int tag, DType dtype, size_t count);
// Throws ProtocolError when `got` does not match what this receive expects.
void checkP2PHeader(const P2PHeader& got, const OpRequest& recv);

}  // namespace mw::detail
