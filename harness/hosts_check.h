// `mwchaos hosts check --hosts FILE` (docs/hosts.md, "Checking the hosts"): starts the agent of
// every host an inventory names, through its launcher, and reports per host what a run needs:
// reachable or why not, the agent's protocol and build, root and the tools network faults need,
// GPUs, the clock's offset, uncertainty and round trip, and the time one fault takes (a signal
// to a sleeping role, there and acknowledged: median and maximum of 20).
//
// Thread rules: one thread.
#pragma once

#include <cstdio>
#include <string>

#include "model/inventory.h"

namespace mw::harness {

// Checks every host of `inv` (ssh: the hosts listed; slurm: those listed, else the allocation's
// nodes; local and netns: this machine), printing one block per host on `out`. Returns 0 when
// every agent answered, 1 when one did not.
int checkHosts(const Inventory& inv, const std::string& agent_path, FILE* out);

// `mwchaos hosts clean`: starts the agent of every host of `inv` (each removes, on start, what
// agents that died on its host left: their firewall chains and jumps, their qdiscs; never a live
// agent's) and prints per host what was removed. Returns 0 when every host was reached and
// cleaned, 1 otherwise (a host unreachable, or something that could not be removed).
int cleanHosts(const Inventory& inv, const std::string& agent_path, FILE* out);

}  // namespace mw::harness
