// One checker per kind of expectation, in the manner of Jepsen's composed checkers: each judges
// one part of a scenario's expect table (or of the run itself) and returns its verdicts, naming
// the world they are about and the numbers behind them. evaluate() (model/expectations.h) is the
// loop over kCheckers. Every checker is a pure function of its arguments.
#pragma once

#include <vector>

#include "model/expectations.h"

namespace mw::harness::checks {

// The shape of every checker.
using Checker = std::vector<Verdict> (*)(const Scenario&, const RunRecord&);

// Each fault that could not be delivered (an error verdict) or that this machine cannot deliver
// (a skipped one), in the record's order.
std::vector<Verdict> faultsDelivered(const Scenario& s, const RunRecord& r);

// "the harness ran the scenario": an error verdict per harness error, and one when a series of
// the record goes back in time (timeOrderError). None when the harness ran cleanly.
std::vector<Verdict> harnessRan(const Scenario& s, const RunRecord& r);

// expect.broken: per world of the scenario, "breaks" or "stays healthy"; without it,
// expect.healthy: "stays healthy" per world named there.
std::vector<Verdict> brokenSet(const Scenario& s, const RunRecord& r);

// expect.detected_within(_world): per world that broke (and was expected to), the time from the
// fault that touched it to the last surviving member's break event.
std::vector<Verdict> detection(const Scenario& s, const RunRecord& r);

// expect.throughput: per throughput_kept, the survivors' rate after (or during) the faults against
// their rate before the first fault (model/throughput.h judges the ratio).
std::vector<Verdict> throughputKept(const Scenario& s, const RunRecord& r);

// expect.replacement_within: per world of each restarted role, the time until every member joined
// the world's new generation; an error verdict when no restart was delivered.
std::vector<Verdict> replacement(const Scenario& s, const RunRecord& r);

// Under a nemesis: every break follows a fault that touches its world (one verdict).
std::vector<Verdict> nemesisExplained(const Scenario& s, const RunRecord& r);

// expect.no_hang: every worker exited within its grace after the stop (one verdict).
std::vector<Verdict> noHang(const Scenario& s, const RunRecord& r);

// expect.no_orphans: no process, namespace or file was left after the run (one verdict).
std::vector<Verdict> noOrphans(const Scenario& s, const RunRecord& r);

// expect.data_intact: per world that carries the built-in traffic, no operation completed with
// wrong content (RunRecord::violations and ::checked); skipped, saying why, when turned off or
// for an nccl world.
std::vector<Verdict> dataIntact(const Scenario& s, const RunRecord& r);

// expect.app_checks: no check a program role reported (mw::reportCheck) failed, and at least one
// was reported (one verdict).
std::vector<Verdict> appChecks(const Scenario& s, const RunRecord& r);

// The checkers in the order their verdicts appear in a report.
inline constexpr Checker kCheckers[] = {faultsDelivered,  harnessRan,  brokenSet,  detection,
                                        throughputKept,   replacement, dataIntact, appChecks,
                                        nemesisExplained, noHang,      noOrphans};

}  // namespace mw::harness::checks
