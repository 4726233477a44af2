// expect.no_orphans: no process, network namespace or file is left after the run.
#include "model/checkers/checkers.h"

namespace mw::harness::checks {

std::vector<Verdict> noOrphans(const Scenario& s, const RunRecord& r) {
  if (!s.expect.no_orphans) return {};
  std::string left = std::to_string(r.leftover_processes) + " processes, " +
                     std::to_string(r.leftover_namespaces) + " network namespaces";
  for (const auto& f : r.leftover_files) left += ", " + f;
  const bool clean =
      r.leftover_processes == 0 && r.leftover_namespaces == 0 && r.leftover_files.empty();
  return {{"no orphan process or file is left",
           "",
           clean ? VerdictStatus::kPass : VerdictStatus::kFail,
           clean ? "0" : left,
           "0",
           clean ? "no worker process, fifo, temporary directory or network namespace remained"
                 : "left behind: " + left,
           s.expect.where,
           {}}};
}

}  // namespace mw::harness::checks
