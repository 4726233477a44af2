// The first operation of each world incarnation in mw_worker's traffic (issue 38): the members
// agree on the incarnation's nonce, from which every tensor's content is derived
// (chaos/traffic_check.h).
//
// Thread rules: agreeNonce is called by the traffic loop that owns the world's traffic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "chaos/worker_config.h"
#include "multiworld/communicator.h"
#include "multiworld/gpu.h"

namespace mw::chaos {

// Rank 0 of traffic `t`'s world draws a nonce and sends it to the loop's other members (a
// broadcast from rank 0; on a pipeline link, a send to rank 1); every member returns it. Returns
// 0 when the operation failed, or when what arrived is not a nonce message (members out of step:
// an incarnation that changed under the operation, whose data met this operation). On a cuda
// world the message goes through `scratch`, device memory of at least kNonceBytes on the world's
// device, allocated once by the caller (cudaMalloc and cudaFree may wait for every kernel on the
// device, another world's stuck one too); 0 as well when it is too small or cannot be copied.
constexpr size_t kNonceBytes = 32;
uint64_t agreeNonce(Communicator& comm, const WorkerTraffic& t, int rank, Device device,
                    DeviceBuffer* scratch);

}  // namespace mw::chaos
