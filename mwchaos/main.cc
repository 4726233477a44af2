// mwchaos: runs Lua chaos scenarios against multiworld worker processes and reports which worlds
// failed, how fast the failures were detected and whether the survivors kept their throughput.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/server.h"
#include "harness/hosts_check.h"
#include "harness/inventory_loader.h"
#include "harness/launchers.h"
#include "harness/loader.h"
#include "harness/orchestrator.h"
#include "model/expectations.h"
#include "model/net_words.h"
#include "model/report.h"
#include "multiworld/multiworld.h"
#include "mwchaos/cli.h"
#include "reports/github.h"
#include "reports/report.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace mw::harness;

namespace {

// The first SIGINT, SIGTERM or SIGHUP interrupts (the roles are told to stop and given their
// stop_within); a second forces (what is still running is killed at once).
std::atomic<bool> interrupted{false};
std::atomic<bool> forced{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler's flags");
void onSignal(int) {
  if (interrupted.exchange(true)) forced = true;
}

json environment(const Cli& cli, int gpus) {
  utsname u{};
  ::uname(&u);
  json env;
  env["host"] = u.nodename;
  env["kernel"] = std::string(u.sysname) + " " + u.release;
  env["cores"] = std::thread::hardware_concurrency();
  env["gpus"] = gpus;
  env["multiworld_version"] = MW_VERSION;
  env["nccl_backend"] = MW_CONFIG_WITH_NCCL != 0;
  env["failpoints"] = mw::failpoints::compiledIn();
  env["backend_override"] = cli.load.backend.value_or("");
  return env;
}

const char* argv0_ = "mwchaos";  // main's argv[0]

// This program's own path: the agent each host runs (mwchaos agent --stdio). Started through the
// dynamic loader (ld.so PROGRAM), /proc/self/exe is the loader, and argv[0] names the program.
std::string selfPath(const char* argv0) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && self.filename().string().rfind("ld-", 0) != 0) return self.string();
  fs::path named = fs::absolute(argv0, ec);
  return ec ? std::string(argv0) : named.string();
}

std::string workerPath(const Cli& cli) {
  if (!cli.worker.empty()) return cli.worker;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "mw_worker").string();
}

std::string folderName(const std::string& file, const std::string& name) {
  std::string base = fs::path(file).stem().string();
  if (base.empty()) base = name;
  for (char& c : base) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return base;
}

// Writes `text` to a new temporary file beside `path` (never following a link there), then
// renames it over `path`: a reader sees the old report or the whole new one, and a link at `path`
// is replaced, never written through. Says why on stderr and returns false on any failure.
bool writeFile(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && mw::reports::writeAll(fd, text);
  const int err = ok ? 0 : errno;
  if (fd >= 0 && ::close(fd) != 0 && ok) ok = false;
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) ok = false;
  if (!ok) {
    std::fprintf(stderr, "mwchaos: cannot write %s: %s\n", path.c_str(),
                 std::strerror(err != 0 ? err : errno));
    if (fd >= 0) ::unlink(tmp.c_str());
  }
  return ok;
}

// Whether files can be made in `dir` (created if missing): a probe file is made and removed.
// `why` says what failed otherwise.
bool writableDir(const fs::path& dir, std::string* why) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    *why = ec.message();
    return false;
  }
  std::string probe = (dir / ".mwchaos-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

// Writes the formats asked for into `dir`; false when any could not be written.
bool writeReports(const Cli& cli, const fs::path& dir, const Report& report) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  bool ok = true;
  if (cli.formats.count("json")) {
    ok = writeFile(dir / "report.json", toJson(report).dump(1) + "\n") && ok;
  }
  if (cli.formats.count("junit")) {
    ok = writeFile(dir / "junit.xml", mw::reports::junitXml({report})) && ok;
  }
  if (cli.formats.count("html")) {
    ok = writeFile(dir / "report.html", mw::reports::html(report)) && ok;
  }
  return ok;
}

void printVerdict(const Report& report, const fs::path& dir, const Cli& cli, bool written) {
  std::string upper = verdictStatusName(report.verdict());
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::printf("%s  %s\n", upper.c_str(), report.scenario.name.c_str());
  if (!report.why.empty()) std::printf("      %s\n", report.why.c_str());
  for (const auto& e : report.verdicts) {
    if (e.status == VerdictStatus::kPass && cli.verbosity < 1) continue;
    std::printf("      %-7s %s: %s\n", verdictStatusName(e.status), e.name.c_str(),
                e.message.c_str());
  }
  if (!written) {
    std::printf("      report: NOT WRITTEN to %s (see the error above)\n", dir.c_str());
  } else if (cli.formats.count("html")) {
    std::printf("      report: %s\n", (dir / "report.html").c_str());
  } else if (cli.formats.count("json")) {
    std::printf("      report: %s\n", (dir / "report.json").c_str());
  }
  std::fflush(stdout);
}

void printErrors(const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::fprintf(stderr, "%s\n", e.c_str());
}

// Loads every scenario named by the command line; prints the errors of those that are invalid.
// Returns kExitUsage when any is, else kExitPass; kExitInterrupted, at once, on a signal (scenario
// code stuck in a loop or a pattern stops when it comes: LuaLimits::interrupted).
int loadAll(const Cli& cli, std::vector<std::pair<std::string, LoadedScenario>>* loaded) {
  auto files = scenarioFiles(cli.paths);
  if (!files) return kExitUsage;
  int rc = kExitPass;
  for (const auto& f : *files) {
    auto r = loadScenario(f, cli.load);
    if (interrupted.load()) {
      printErrors(r.errors);  // where the scenario's code was when it stopped
      std::fprintf(stderr, "mwchaos: interrupted while loading %s\n", f.c_str());
      return kExitInterrupted;
    }
    if (!r.loaded) {
      printErrors(r.errors);
      rc = kExitUsage;
    } else {
      loaded->emplace_back(f, std::move(*r.loaded));
    }
  }
  return rc;
}

// The logical hosts the roles of `s` are placed on, each once, sorted.
std::vector<std::string> scenarioHosts(const Scenario& s) {
  std::set<std::string> hosts;
  for (const auto& [name, r] : s.roles) {
    if (!r.host.empty()) hosts.insert(r.host);
  }
  return {hosts.begin(), hosts.end()};
}

// Loads the inventory of --hosts into `inventory` and binds every loaded scenario's hosts with it
// (launcherFits, then bindScenario); without --hosts, and `running`, checks launcherFits alone;
// prints what is wrong ("file:line: field: what", or the scenario and the host not bound). Returns
// kExitUsage when anything is, else kExitPass (also without --hosts: `inventory` stays empty);
// kExitInterrupted when a signal stopped the inventory's code. `unbound`, when given, receives the
// files of the scenarios it could not bind.
int loadHosts(const Cli& cli, const std::vector<std::pair<std::string, LoadedScenario>>& loaded,
              std::optional<Inventory>* inventory, bool running,
              std::set<std::string>* unbound = nullptr) {
  if (cli.hosts.empty()) {
    if (!running) return kExitPass;  // validate: the file alone
    int rc = kExitPass;  // run: a fault that needs a launcher is refused before anything starts
    for (const auto& entry : loaded) {
      if (mw::Status fits = launcherFits(entry.second.scenario, nullptr); !fits.ok()) {
        rc = kExitUsage;
        std::fprintf(stderr, "%s\n", fits.message().c_str());
      }
    }
    return rc;
  }
  InventoryLoad r = loadInventory(cli.hosts, cli.load.lua, InventoryEnv::fromProcess());
  if (!r.inventory) {
    printErrors(r.errors);
    return interrupted.load() ? kExitInterrupted : kExitUsage;
  }
  int rc = kExitPass;
  std::set<std::string> said;  // a message of the inventory alone (no allocation) is said once
  for (const auto& [file, l] : loaded) {
    // launcherFits names the fault's file:line itself; bindScenario names no file.
    mw::Status fits = launcherFits(l.scenario, &*r.inventory);
    mw::Status bound = bindScenario(*r.inventory, scenarioHosts(l.scenario)).status();
    if (!fits.ok() || !bound.ok()) {
      rc = kExitUsage;
      if (unbound != nullptr) unbound->insert(file);
    }
    if (!fits.ok()) std::fprintf(stderr, "%s\n", fits.message().c_str());
    if (!bound.ok() && said.insert(bound.message()).second) {
      std::fprintf(stderr, "%s: %s\n", file.c_str(), bound.message().c_str());
    }
  }
  *inventory = std::move(r.inventory);
  return rc;
}

// `mwchaos hosts check --hosts FILE`.
int hostsCheck(const Cli& cli) {
  InventoryLoad r = loadInventory(cli.hosts, cli.load.lua, InventoryEnv::fromProcess());
  if (!r.inventory) {
    printErrors(r.errors);
    return interrupted.load() ? kExitInterrupted : kExitUsage;
  }
  if (cli.paths[0] == "clean") return cleanHosts(*r.inventory, selfPath(argv0_), stdout);
  return checkHosts(*r.inventory, selfPath(argv0_), stdout);
}

int validate(const Cli& cli) {
  std::vector<std::pair<std::string, LoadedScenario>> loaded;
  int rc = loadAll(cli, &loaded);
  if (rc == kExitInterrupted) return rc;
  std::optional<Inventory> inventory;  // --hosts: checked with every scenario loaded
  std::set<std::string> unbound;
  const int hosts_rc = loadHosts(cli, loaded, &inventory, false, &unbound);
  if (hosts_rc == kExitInterrupted) return hosts_rc;
  rc = combineExit(rc, hosts_rc);
  if (hosts_rc != kExitPass && !inventory) return rc;  // no scenario was checked with --hosts
  for (const auto& [f, l] : loaded) {
    if (unbound.count(f)) continue;  // its error is printed
    const Scenario& s = l.scenario;
    std::printf("OK  %s: %s (%zu worlds, %zu roles, %zu faults, %.1f s)\n", f.c_str(),
                s.name.c_str(), s.worlds.size(), s.roles.size(), s.timeline.size(),
                static_cast<double>(s.duration.count()) / 1000.0);
  }
  return rc;
}

// The exit code of one scenario's verdict.
int exitFor(VerdictStatus verdict) {
  switch (verdict) {
    case VerdictStatus::kPass:
      return kExitPass;
    case VerdictStatus::kSkipped:
      return kExitUnavailable;
    case VerdictStatus::kInconclusive:
      return kExitInconclusive;
    case VerdictStatus::kFail:
    case VerdictStatus::kError:
      break;
  }
  return kExitFail;
}

// Runs `l` once and judges it; a harness bug becomes a report that says so.
Report runOnce(const LoadedScenario& l, const RunOptions& ro, const json& env, RunResult* out) {
  const Scenario& s = l.scenario;
  RunResult& res = *out;
  res = RunResult();
  Outcome outcome = Outcome::kCompleted;
  std::vector<Verdict> verdicts;
  try {
    res = runScenario(s, ro);  // interrupted at any moment: Outcome::kInterrupted (Run::go)
    outcome = res.outcome;
    if (outcome == Outcome::kCompleted) {
      verdicts = evaluate(s, res.record);
      if (s.expect.has_check) {
        auto [ok, msg] = l.callCheck(runJson(s, res.record).dump());
        if (!ok && ro.interrupted != nullptr && ro.interrupted->load()) {  // stopped by the signal
          res.outcome = Outcome::kInterrupted;
          res.why = "interrupted while the expect.check hook ran: " + msg;
          return makeReport(s, res.record, {}, Outcome::kInterrupted, res.why, env);
        }
        verdicts.push_back({kCheckHookVerdict,
                            "",
                            ok ? VerdictStatus::kPass : VerdictStatus::kFail,
                            "",
                            "",
                            msg,
                            s.expect.where,
                            {}});
      }
    }
  } catch (const std::exception& e) {  // a bug of the harness: still a report that says so
    outcome = Outcome::kHarnessError;
    res.outcome = Outcome::kHarnessError;
    res.why = std::string("internal error of the harness: ") + e.what();
    verdicts.clear();
  }
  return makeReport(s, res.record, std::move(verdicts), outcome, res.why, env);
}

int run(const Cli& cli) {
  // Validate everything first: a typo in the tenth file should not wait for nine runs.
  std::vector<std::pair<std::string, LoadedScenario>> loaded;
  int rc = loadAll(cli, &loaded);
  if (rc != kExitPass) return rc;
  std::optional<Inventory> inventory;  // --hosts
  if ((rc = loadHosts(cli, loaded, &inventory, true)) != kExitPass) return rc;
  const std::string worker = workerPath(cli);
  if (::access(worker.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "mwchaos: the worker program %s is missing or not executable (build "
                 "the mw_worker target, or pass --worker PATH)\n",
                 worker.c_str());
    return kExitUnavailable;
  }
  const fs::path out = cli.out.empty() ? fs::path("mwchaos-out") : fs::path(cli.out);
  // Reports that cannot be written are found before any scenario runs, not after a soak.
  if (std::string why; !writableDir(out, &why)) {
    std::fprintf(stderr, "mwchaos: cannot write reports to %s: %s; nothing was run\n", out.c_str(),
                 why.c_str());
    return kExitUnavailable;
  }
  // Through the CUDA runtime the library loads when it is there (multiworld/gpu.h): mwchaos
  // does not link it, and starts on machines without it (0 GPUs).
  const int gpus = mw::visibleGpuCount();
  const json env = environment(cli, gpus);
  RunOptions ro;
  ro.worker_path = worker;
  ro.agent_path = selfPath(argv0_);
  ro.verbosity = cli.verbosity;
  ro.tty = ::isatty(2) != 0;
  ro.interrupted = &interrupted;
  ro.forced = &forced;
  ro.gpus = gpus;
  ro.inventory = inventory ? &*inventory : nullptr;
  ro.history = cli.history;
  std::vector<Report> reports;
  std::set<std::string> used;
  bool all_written = true;  // a gate must not pass on a report that is not there
  for (auto& [file, l] : loaded) {
    const Scenario& s = l.scenario;
    RunResult res;
    Report report = runOnce(l, ro, env, &res);
    // An inconclusive verdict, and only that, may be run again: the earlier runs' reasons stay in
    // the report, and each rerun is printed.
    std::vector<EarlierRun> earlier;
    while (report.verdict() == VerdictStatus::kInconclusive &&
           static_cast<int>(earlier.size()) < cli.rerun_inconclusive && !interrupted.load()) {
      EarlierRun e;
      for (const auto& v : report.verdicts) {
        if (v.status == VerdictStatus::kInconclusive)
          e.inconclusive.push_back(v.name + ": " + v.message);
      }
      earlier.push_back(e);
      std::printf("RERUN %s: inconclusive, run %zu of at most %d\n", s.name.c_str(),
                  earlier.size() + 1, cli.rerun_inconclusive + 1);
      std::fflush(stdout);
      report = runOnce(l, ro, env, &res);
    }
    report.earlier_runs = std::move(earlier);
    std::string folder = folderName(s.file, s.name);
    while (used.count(folder)) folder += "_";
    used.insert(folder);
    const bool written = writeReports(cli, out / folder, report);
    all_written = all_written && written;
    printVerdict(report, out / folder, cli, written);
    if (cli.formats.count("github"))
      std::fputs(mw::reports::githubAnnotations(report).c_str(), stdout);
    rc = combineExit(rc, exitFor(report.verdict()));
    reports.push_back(std::move(report));
    if (res.outcome == Outcome::kInterrupted || interrupted.load()) {
      std::fprintf(stderr, "mwchaos: interrupted; every worker was stopped\n");
      if (cli.formats.count("junit")) writeFile(out / "junit.xml", mw::reports::junitXml(reports));
      return kExitInterrupted;
    }
  }
  if (cli.formats.count("junit")) {
    std::error_code ec;
    fs::create_directories(out, ec);
    all_written = writeFile(out / "junit.xml", mw::reports::junitXml(reports)) && all_written;
  }
  if (std::string why;
      cli.formats.count("github") && !mw::reports::appendGithubSummary(reports, &why)) {
    std::fprintf(stderr, "mwchaos: the GitHub job summary was not written: %s\n", why.c_str());
    all_written = false;
  }
  if (!all_written) {
    std::fprintf(stderr, "mwchaos: some reports could not be written; exit %d\n", kExitUnavailable);
    return rc == kExitUsage ? rc : kExitUnavailable;
  }
  return rc;
}

int report(const Cli& cli) {
  if (cli.paths.size() != 1) return usageError("report takes one report.json");
  const std::string path = cli.paths[0];
  std::ifstream f(path);
  if (!f) return usageError("cannot read " + path);
  try {
    Report fresh = rejudge(reportFromJson(json::parse(f)));
    fs::path dir = cli.out.empty() ? fs::path(path).parent_path() : fs::path(cli.out);
    if (dir.empty()) dir = ".";
    bool written = writeReports(cli, dir, fresh);
    printVerdict(fresh, dir, cli, written);
    if (cli.formats.count("github")) {
      std::fputs(mw::reports::githubAnnotations(fresh).c_str(), stdout);
      std::string why;
      if (!mw::reports::appendGithubSummary({fresh}, &why)) {
        std::fprintf(stderr, "mwchaos: the GitHub job summary was not written: %s\n", why.c_str());
        written = false;
      }
    }
    if (!written) return kExitUnavailable;
    return exitFor(fresh.verdict());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mwchaos: %s: %s\n", path.c_str(), e.what());
    return kExitUsage;
  }
}

}  // namespace

// `mwchaos agent --stdio [--dev IF]`: a host agent (docs/hosts.md), started by the controller
// through a launcher, never by hand.
int agentMain(int argc, char** argv) {
  mw::agent::ServeOptions o;
  bool stdio = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(
          "usage: mwchaos agent --stdio [--dev IF]\n"
          "\n"
          "A host's agent (docs/hosts.md): the controller (mwchaos run or hosts check/clean "
          "with --hosts)\n"
          "starts one on each host through the inventory's launcher (ssh, srun, a network "
          "namespace) and\n"
          "drives it over its standard input and output; it is not meant to be run by hand. It "
          "starts the\n"
          "host's roles, delivers their faults and the host's network faults, and when its "
          "controller goes\n"
          "(its pipe closes, its lease expires, or a terminating signal arrives) it removes its "
          "network\n"
          "rules, kills its roles and exits. On start it removes what agents that died on this "
          "host left.\n"
          "\n"
          "  --stdio    required: serve the controller on standard input and output\n"
          "  --dev IF   the interface bandwidth and delay faults shape when a fault names none\n"
          "             (default: the one the route to the host's peers uses)\n"
          "  -h, --help this text\n",
          stdout);
      return kExitPass;
    }
    if (a == "--stdio") {
      stdio = true;
    } else if (a == "--dev" && i + 1 < argc) {
      o.default_dev = argv[++i];
      if (!mw::harness::isInterfaceName(o.default_dev)) {
        return usageError("agent: --dev '" + o.default_dev +
                          "' is no interface name (1 to 15 letters, digits, _ . -)");
      }
    } else {
      return usageError("agent: unknown option '" + a + "' (agent takes --stdio and --dev IF)");
    }
  }
  if (!stdio)
    return usageError(
        "agent: --stdio is required (the controller drives the agent over "
        "its standard input and output)");
  return mw::agent::serve(0, 1, o);
}

int main(int argc, char** argv) {
  argv0_ = argv[0];
  if (argc >= 2 && std::string(argv[1]) == "agent") return agentMain(argc, argv);
  Cli cli;
  if (int rc = parseCli(argc, argv, cli); rc >= 0) return rc;
  cli.load.lua.interrupted = &interrupted;
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a worker that died must not take the harness with it
  if (cli.command == "list") {
    std::fputs(describeApi().c_str(), stdout);
    return kExitPass;
  }
  try {
    if (cli.command == "validate") return validate(cli);
    if (cli.command == "hosts") return hostsCheck(cli);
    if (cli.command == "report") return report(cli);
    return run(cli);
  } catch (const std::exception& e) {  // never an abort: a gate reads the exit code
    std::fprintf(stderr, "mwchaos: internal error: %s\n", e.what());
    return kExitUnavailable;
  }
}
