// The first operation of each world incarnation in mw_worker's traffic (issue 38): the members
// agree on the incarnation's nonce, from which every tensor's content is derived
// (chaos/traffic_check.h).
//
// Thread rules: agreeNonce is called by the traffic loop that owns the world's traffic.
#pragma once

#include <cstdint>
#include <string>

#include "chaos/worker_config.h"
#include "multiworld/communicator.h"

namespace mw::chaos {

// Rank 0 of traffic `t`'s world draws a nonce and sends it to the loop's other members (a
// broadcast from rank 0; on a pipeline link, a send to rank 1); every member returns it. Returns
// 0 when the operation failed, or when what arrived is not a nonce message (members out of step:
// an incarnation that changed under the operation, whose data met this operation). On a cuda
// world the message is in device memory on `device` (a DeviceBuffer of 32 bytes); 0 as well when
// that memory cannot be allocated or copied.
uint64_t agreeNonce(Communicator& comm, const WorkerTraffic& t, int rank, Device device);

}  // namespace mw::chaos
