// What the expectation checkers (model/checkers/checkers.h) share: number formats, the first
// break of a world, and the "stays healthy" verdict. Pure functions of their arguments.
#pragma once

#include <map>
#include <string>

#include "model/expectations.h"

namespace mw::harness::checks {

// `f` (a printf format with one double conversion) applied to `v`: fmt("%.3f s", 1.5) = "1.500 s".
std::string fmt(const char* f, double v);

// Seconds as whole milliseconds: ms(0.0484) = "48 ms".
std::string ms(double seconds);

// The earliest event of the run (RunRecord::inRun) that reports `world` broken at or after
// `after`, seen by `role` ("": by any member); null when there is none. Points into `r.events`.
const EventRec* firstBroken(const RunRecord& r, const std::string& world, const std::string& role,
                            double after);

// Every world of the scenario that broke during the run, with its first break (firstBroken from
// time 0). The pointers point into `r.events`.
std::map<std::string, const EventRec*> brokenWorlds(const Scenario& s, const RunRecord& r);

// "world W stays healthy" about `name`, judged at `where`: passes when `first_break` is null,
// fails naming the break otherwise.
Verdict staysHealthy(const std::string& name, const EventRec* first_break,
                     const std::string& where);

}  // namespace mw::harness::checks
