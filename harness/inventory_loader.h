// Loading an inventory file (`mwchaos run --hosts FILE`, docs/hosts.md, "Inventory"): Lua 5.4 runs
// the file in the scenario loader's sandbox (harness/lua_sandbox.h), and the table it returns is
// checked field by field into the model's Inventory (model/inventory.h), with messages that name
// the file, the line, the field and what is wrong.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/lua_sandbox.h"
#include "model/inventory.h"

namespace mw::harness {

// What of the environment an inventory is read with: the Slurm allocation's variables, used
// with launcher "slurm" only.
struct InventoryEnv {
  std::string slurm_job_id;        // $SLURM_JOB_ID; "": unset
  std::string slurm_job_nodelist;  // $SLURM_JOB_NODELIST, a hostlist expression; "": unset

  // The variables of this process's environment.
  static InventoryEnv fromProcess();
};

// The inventory, or the errors (each "file:line: field: what", or "file: what" where no line
// applies); never both.
struct InventoryLoad {
  std::optional<Inventory> inventory;
  std::vector<std::string> errors;
};

// Runs `path` under `limits` (the time budget and memory cap of scenario code) and checks the
// table it returns: only known fields, each of its type and range (inventoryProblems), launcher
// sections (ssh, slurm) only for their launcher. With launcher "slurm", `env` gives the
// allocation (its nodelist expanded with expandHostlist). The result's source is `path`.
// Never throws for any content of the file.
InventoryLoad loadInventory(const std::string& path, const LuaLimits& limits,
                            const InventoryEnv& env);

}  // namespace mw::harness
