#include "mwchaos/cli.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "harness/lua_sandbox.h"

namespace fs = std::filesystem;

namespace mw::harness {

namespace {

constexpr const char* kUsage = R"(usage: mwchaos <command> [options] [paths]

Runs chaos scenarios (Lua files, see docs/scenarios.md): worker processes join multiworld worlds,
faults are injected on a timeline, and the run checks that exactly the expected worlds fail while
the others keep their throughput. Reports: JSON, JUnit XML and an HTML timeline per scenario.

commands:
  run PATH...         run scenario files; a folder runs every *.lua file in it
  validate PATH...    load and check scenarios without running them
  list                the scenario API: worlds, roles, traffic patterns, faults, expectations
  report REPORT.json  re-evaluate a saved report's expectations and write its reports again
  hosts check --hosts FILE
                      start the agent of every host the inventory names and report, per host:
                      reachable, build, root and tools, GPUs, clock offset, one fault's time,
                      and what agents that died there left (each agent removes that on start)
  hosts clean --hosts FILE
                      start the agent of every host and report what it removed: the firewall
                      chains and qdiscs of agents that died there (SIGKILL, OOM, a crash), never
                      a live agent's; exit 1 when a host cannot be reached or cleaned
  agent --stdio       a host's agent, which run and hosts start through the inventory's
                      launcher; not for use by hand (mwchaos agent --help)

options:
  -o, --out DIR       where reports go, one folder per scenario (default: mwchaos-out; for
                      report: the folder of REPORT.json)
  --seed N            override every scenario's seed (random faults and Lua's math.random):
                      a whole number from 0 to 9007199254740991 (2^53 - 1)
  --duration D        run every scenario for D ("60s", "10m", 500 ms to 24 h): a soak, with a
                      nemesis drawing faults until 1 s before the end
  --backend B         run every world on backend B (gloo or nccl): --backend gloo plays a GPU
                      scenario on CPU worlds where there is no GPU
  --format LIST       report formats, comma separated: json,junit,html (default: all three),
                      and github: ::error annotations at each failed expectation's file:line
                      and a verdict table appended to $GITHUB_STEP_SUMMARY (docs/ci.md)
  --rerun-inconclusive N
                      run a scenario whose verdict is inconclusive again, up to N times (default
                      0, at most 10); each rerun is printed and counted in its report ("reruns")
  --history N         keep each built-in role's operations in the JSON report (run.history):
                      operation, world, generation, peer, sequence number, start, end and
                      outcome, up to N per role (1 to 1000000), for checkers of your own
                      (docs/scenarios.md, "The operation history"); off by default
  --hosts FILE        the inventory (run, validate): binds the scenarios' logical hosts (a
                      role's host = "h2") to real hosts and names the launcher that reaches
                      them: local, netns, ssh or slurm (docs/hosts.md); an invalid inventory or
                      a scenario host it does not bind is a usage error (exit 2)
  -v, --verbose       print every line the workers report
  -q, --quiet         no progress line
  --worker PATH       the worker program (default: mw_worker next to this program)
  --lua-time-budget-ms N
                      how long scenario code may run at each entry: loading its file, or one
                      call of its expect.check hook (default: @TIME@); past it, the file is
                      invalid (exit 2), or the hook fails
  --lua-memory-mb N   the memory, in MiB, that a scenario's Lua code may hold (default: @MEMORY@)
  -h, --help          this text

exit codes:
  0  every expectation held
  1  an expectation failed, or the harness could not run a scenario (the report says why)
  2  invalid scenario or usage
  3  this machine cannot run a scenario (no GPU, no failpoints...): what is missing is printed;
     or a report could not be written (a CI gate never passes without its report),
     or mwchaos failed outside any scenario's run (inside one: 1, and its report says why)
  4  inconclusive: nothing failed, but a throughput verdict could not tell pass from fail on
     this machine's noise (its report gives the evidence; docs/scenarios.md)
  130 interrupted by Ctrl-C, SIGTERM or SIGHUP: the roles are told to stop and given their time
     to exit (a program role's stop_within), the report says "interrupted"; a second signal
     kills the roles at once
When several scenarios run, the code is the first of 2, 1, 4, 3, 0 that applies, except that a
report that could not be written makes it 3 (unless it is 2). Reports are written to a
temporary file beside the final one and renamed: a link at the final path is replaced, never
followed.

environment:
  MW_FIU_POSIX_PRELOAD  libfiu's fiu_posix_preload.so, for posix/... failpoints (default: the one
                        found at build time; Debian/Ubuntu: apt-get install libfiu0)

examples:
  mwchaos run scenarios/demo_worker_killed.lua
  mwchaos run --backend gloo -o out scenarios/
  mwchaos validate scenarios/*.lua
  mwchaos run --hosts cluster.lua scenarios/net_partition_heals.lua
  mwchaos report out/demo_worker_killed/report.json --format html
)";

// The help text names the ranges of --seed and --duration.
static_assert(kMaxSeed == 9007199254740991ULL && kMaxTime == Ms(24 * 3600 * 1000));

}  // namespace

// kUsage, with the defaults of the Lua limits (harness/lua_sandbox.h) filled in.
std::string usage() {
  std::string u = kUsage;
  u.replace(u.find("@TIME@"), 6, std::to_string(kDefaultLuaTimeBudgetMs));
  u.replace(u.find("@MEMORY@"), 8, std::to_string(kDefaultLuaMemoryMiB));
  return u;
}

namespace {

// A whole number in [lo, hi], or nullopt.
std::optional<unsigned long long> wholeNumber(const std::optional<std::string>& text,
                                              unsigned long long lo, unsigned long long hi) {
  if (!text || text->empty() || !std::isdigit(static_cast<unsigned char>((*text)[0]))) {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(text->c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || n < lo || n > hi) return std::nullopt;
  return n;
}

}  // namespace

int usageError(const std::string& why) {
  std::fprintf(stderr, "mwchaos: %s\nRun 'mwchaos --help' for usage.\n", why.c_str());
  return kExitUsage;
}

// Parses argv into `cli`; returns -1 to go on, or an exit code.
int parseCli(int argc, char** argv, Cli& cli) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> std::optional<std::string> {
      if (i + 1 >= args.size()) return std::nullopt;
      (void)flag;
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(usage().c_str(), stdout);
      return kExitPass;
    } else if (a == "-o" || a == "--out") {
      auto v = value("--out");
      if (!v) return usageError(a + " needs a folder");
      cli.out = *v;
    } else if (a == "--seed") {
      // The ranges of model/scenario.h, as a scenario file's seed and duration have them.
      auto v = value("--seed");
      auto n = wholeNumber(v, 0, kMaxSeed);
      if (!n) {
        return usageError("--seed: expected a whole number from 0 to " + std::to_string(kMaxSeed) +
                          (v ? ", got '" + *v + "'" : ""));
      }
      cli.load.seed = *n;
    } else if (a == "--duration") {
      auto v = value("--duration");
      if (!v) return usageError("--duration needs a duration like 60s or 10m");
      std::string why;
      auto d = parseDuration(*v, &why, Ms(500), kMaxTime);
      if (!d) return usageError("--duration: " + why);
      cli.load.duration = d;
    } else if (a == "--backend") {
      auto v = value("--backend");
      if (!v || (*v != "gloo" && *v != "nccl")) {
        return usageError("--backend: expected gloo or nccl" + (v ? ", got '" + *v + "'" : ""));
      }
      cli.load.backend = *v;
    } else if (a == "--format") {
      auto v = value("--format");
      if (!v) return usageError("--format needs a list like json,junit,html");
      cli.formats.clear();
      std::string item;
      for (size_t p = 0; p <= v->size(); ++p) {
        if (p == v->size() || (*v)[p] == ',') {
          if (item != "json" && item != "junit" && item != "html" && item != "github") {
            return usageError("--format: unknown format '" + item +
                              "' (json, junit, html, github)");
          }
          cli.formats.insert(item);
          item.clear();
        } else {
          item += (*v)[p];
        }
      }
    } else if (a == "--lua-time-budget-ms" || a == "--lua-memory-mb") {
      const bool time = a == "--lua-time-budget-ms";
      auto v = value(a.c_str());
      auto n = wholeNumber(v, 1, time ? 86400000ULL : 1ULL << 20);
      if (!n) {
        return usageError(a + ": expected a whole number of " +
                          (time ? "milliseconds from 1 to 86400000" : "MiB from 1 to 1048576") +
                          (v ? ", got '" + *v + "'" : ""));
      }
      if (time) cli.load.lua.time_budget = Ms(static_cast<long long>(*n));
      if (!time) cli.load.lua.memory_bytes = *n << 20;
    } else if (a == "--rerun-inconclusive") {
      auto v = value(a.c_str());
      auto n = wholeNumber(v, 0, 10);
      if (!n) {
        return usageError("--rerun-inconclusive: expected a whole number from 0 to 10" +
                          (v ? ", got '" + *v + "'" : ""));
      }
      cli.rerun_inconclusive = static_cast<int>(*n);
    } else if (a == "--history") {
      auto v = value(a.c_str());
      auto n = wholeNumber(v, 1, kMaxHistory);
      if (!n) {
        return usageError("--history: expected a whole number of operations from 1 to " +
                          std::to_string(kMaxHistory) + (v ? ", got '" + *v + "'" : ""));
      }
      cli.history = static_cast<int64_t>(*n);
    } else if (a == "-v" || a == "--verbose") {
      cli.verbosity = 2;
    } else if (a == "-q" || a == "--quiet") {
      cli.verbosity = 0;
    } else if (a == "--hosts") {
      auto v = value("--hosts");
      if (!v || v->empty()) return usageError("--hosts needs an inventory file (docs/hosts.md)");
      cli.hosts = *v;
    } else if (a == "--worker") {
      auto v = value("--worker");
      if (!v) return usageError("--worker needs a path");
      cli.worker = *v;
    } else if (a.size() > 1 && a[0] == '-') {
      return usageError("unknown option '" + a + "'");
    } else if (cli.command.empty()) {
      cli.command = a;
    } else {
      cli.paths.push_back(a);
    }
  }
  if (cli.command.empty()) {
    return usageError("no command given (run, validate, list, report, hosts check, hosts clean)");
  }
  static const std::set<std::string> commands = {"run", "validate", "list", "report", "hosts"};
  if (!commands.count(cli.command)) return usageError("unknown command '" + cli.command + "'");
  if (!cli.hosts.empty() && cli.command != "run" && cli.command != "validate" &&
      cli.command != "hosts") {
    return usageError("--hosts is for run, validate and hosts check/clean, not " + cli.command);
  }
  if (cli.history > 0 && cli.command != "run") {
    return usageError("--history is for run, not " + cli.command);
  }
  if (cli.command == "hosts") {
    if (cli.paths.size() != 1 || (cli.paths[0] != "check" && cli.paths[0] != "clean")) {
      return usageError(
          "hosts takes one subcommand: hosts check --hosts FILE, or hosts clean --hosts FILE");
    }
    if (cli.hosts.empty()) {
      return usageError("hosts " + cli.paths[0] + " needs --hosts FILE (docs/hosts.md)");
    }
    return -1;
  }
  if (cli.command != "list" && cli.paths.empty()) {
    return usageError(cli.command + " needs " +
                      (cli.command == "report" ? "a report.json" : "scenario files or folders"));
  }
  return -1;
}

// Scenario files named by `paths`: files as given, folders expanded to their *.lua files.
std::optional<std::vector<std::string>> scenarioFiles(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> in_dir;
      for (const auto& e : fs::directory_iterator(p, ec)) {
        if (e.path().extension() == ".lua") in_dir.push_back(e.path().string());
      }
      std::sort(in_dir.begin(), in_dir.end());
      if (in_dir.empty()) {
        usageError("folder '" + p + "' holds no .lua scenario files");
        return std::nullopt;
      }
      out.insert(out.end(), in_dir.begin(), in_dir.end());
    } else if (fs::exists(p, ec)) {
      out.push_back(p);
    } else {
      usageError("no such file or folder: " + p);
      return std::nullopt;
    }
  }
  return out;
}

int combineExit(int a, int b) {
  for (int c : {kExitUsage, kExitFail, kExitInconclusive, kExitUnavailable}) {
    if (a == c || b == c) return c;
  }
  return kExitPass;
}

}  // namespace mw::harness
