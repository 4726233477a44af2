// The nemesis: a seeded random schedule of faults (docs/scenarios.md, "nemesis"), drawn before the
// run so that the planned timeline is known, written into the report, and the same for the same
// seed on every machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/scenario.h"

namespace mw::harness {

// The faults a nemesis draws for `spec`, in time order. Faults follow one another: each starts a
// random gap after the previous one ended (uniform in [gap/2, 3*gap/2]) and is undone (heal,
// resume, restart) `hold` after it starts; none ends after `spec.stop`. A partition cuts one host
// off from `all_hosts`' others; loss drops `spec.loss` of one host's packets; pause and kill take
// one of `spec.roles`. Each action's `where` is "<where> (nemesis #k)". The draw stops after
// `max_faults` faults (2 * max_faults actions): a caller that wants to refuse a schedule past a
// limit asks for one more fault than the limit allows.
// A pure function of its arguments (splitmix64 from `seed`).
// REQUIRES: spec.faults, and spec.roles or spec.hosts for the kinds asked for, are not empty;
// spec.gap >= 1 ms.
std::vector<ActionSpec> drawNemesis(const NemesisSpec& spec, uint64_t seed,
                                    const std::vector<std::string>& all_hosts,
                                    const std::string& where, size_t max_faults = SIZE_MAX);

}  // namespace mw::harness
