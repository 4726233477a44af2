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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/expectations.h"
#include "harness/orchestrator.h"
#include "harness/scenario.h"
#include "multiworld/multiworld.h"
#include "reports/github.h"
#include "reports/report.h"

#if MW_CONFIG_WITH_NCCL
#include <cuda_runtime.h>
#endif

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace mw::harness;

namespace {

constexpr int kExitPass = 0, kExitFail = 1, kExitUsage = 2, kExitUnavailable = 3;
constexpr int kExitInterrupted = 130;

constexpr const char* kUsage = R"(usage: mwchaos <command> [options] [paths]

Runs chaos scenarios (Lua files, see docs/scenarios.md): worker processes join multiworld worlds,
faults are injected on a timeline, and the run checks that exactly the expected worlds fail while
the others keep their throughput. Reports: JSON, JUnit XML and an HTML timeline per scenario.

commands:
  run PATH...         run scenario files; a folder runs every *.lua file in it
  validate PATH...    load and check scenarios without running them
  list                the scenario API: worlds, roles, traffic patterns, faults, expectations
  report REPORT.json  re-evaluate a saved report's expectations and write its reports again

options:
  -o, --out DIR       where reports go, one folder per scenario (default: mwchaos-out; for
                      report: the folder of REPORT.json)
  --seed N            override every scenario's seed (random faults and Lua's math.random)
  --duration D        run every scenario for D ("60s", "10m"): a soak, with a nemesis drawing
                      faults until 1 s before the end
  --backend B         run every world on backend B (gloo or nccl): --backend gloo plays a GPU
                      scenario on CPU worlds where there is no GPU
  --format LIST       report formats, comma separated: json,junit,html (default: all three),
                      and github: ::error annotations at each failed expectation's file:line
                      and a verdict table appended to $GITHUB_STEP_SUMMARY (docs/ci.md)
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
When several scenarios run, the code is the first of 2, 1, 3, 0 that applies, except that a
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
  mwchaos report out/demo_worker_killed/report.json --format html
)";

std::atomic<bool> interrupted{false};
void onSignal(int) { interrupted = true; }

struct Cli {
  std::string command;
  std::vector<std::string> paths;
  std::string out;
  LoadOptions load;
  std::set<std::string> formats = {"json", "junit", "html"};
  int verbosity = 1;
  std::string worker;
};

// kUsage, with the defaults of the Lua limits (harness/lua_sandbox.h) filled in.
std::string usage() {
  std::string u = kUsage;
  u.replace(u.find("@TIME@"), 6, std::to_string(kDefaultLuaTimeBudgetMs));
  u.replace(u.find("@MEMORY@"), 8, std::to_string(kDefaultLuaMemoryMiB));
  return u;
}

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

int usageError(const std::string& why) {
  std::fprintf(stderr, "mwchaos: %s\nRun 'mwchaos --help' for usage.\n", why.c_str());
  return kExitUsage;
}

// Parses argv into `cli`; returns -1 to go on, or an exit code.
int parse(int argc, char** argv, Cli& cli) {
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
      auto v = value("--seed");
      if (!v) return usageError("--seed needs a number");
      char* end = nullptr;
      errno = 0;
      unsigned long long n = std::strtoull(v->c_str(), &end, 10);
      if (v->empty() || *end != '\0' || errno != 0 || (*v)[0] == '-') {
        return usageError("--seed: '" + *v + "' is not a whole number >= 0");
      }
      cli.load.seed = n;
    } else if (a == "--duration") {
      auto v = value("--duration");
      auto d = v ? parseDuration(*v) : std::nullopt;
      if (!d || *d < Ms(500)) return usageError("--duration: expected a duration like 60s or 10m");
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
    } else if (a == "-v" || a == "--verbose") {
      cli.verbosity = 2;
    } else if (a == "-q" || a == "--quiet") {
      cli.verbosity = 0;
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
  if (cli.command.empty()) return usageError("no command given (run, validate, list, report)");
  static const std::set<std::string> commands = {"run", "validate", "list", "report"};
  if (!commands.count(cli.command)) return usageError("unknown command '" + cli.command + "'");
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

int gpuCount() {
#if MW_CONFIG_WITH_NCCL
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
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

// Writes the formats asked for into `dir`; false when any could not be written.
bool writeReports(const Cli& cli, const fs::path& dir, const json& doc) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  bool ok = true;
  if (cli.formats.count("json")) ok = writeFile(dir / "report.json", doc.dump(1) + "\n") && ok;
  if (cli.formats.count("junit")) {
    ok = writeFile(dir / "junit.xml", mw::reports::junitXml({doc})) && ok;
  }
  if (cli.formats.count("html")) ok = writeFile(dir / "report.html", mw::reports::html(doc)) && ok;
  return ok;
}

void printVerdict(const json& doc, const fs::path& dir, const Cli& cli, bool written) {
  const std::string v = mw::reports::verdictOf(doc);
  const std::string name = doc["scenario"].value("name", std::string());
  std::string upper = v;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::printf("%s  %s\n", upper.c_str(), name.c_str());
  if (!doc.value("why", std::string()).empty())
    std::printf("      %s\n", doc["why"].get<std::string>().c_str());
  for (const auto& e : doc["expectations"]) {
    const std::string st = e.value("status", std::string());
    if (st == "pass" && cli.verbosity < 1) continue;
    std::printf("      %-7s %s: %s\n", st.c_str(), e.value("name", std::string()).c_str(),
                e.value("message", std::string()).c_str());
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

// Combines exit codes: the first of 2, 1, 3, 0 that applies.
int combine(int a, int b) {
  for (int c : {kExitUsage, kExitFail, kExitUnavailable}) {
    if (a == c || b == c) return c;
  }
  return kExitPass;
}

void printErrors(const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::fprintf(stderr, "%s\n", e.c_str());
}

// Loads every scenario named by the command line; prints the errors of those that are invalid.
// Returns kExitUsage when any is, else kExitPass.
int loadAll(const Cli& cli, std::vector<std::pair<std::string, LoadedScenario>>* loaded) {
  auto files = scenarioFiles(cli.paths);
  if (!files) return kExitUsage;
  int rc = kExitPass;
  for (const auto& f : *files) {
    auto r = loadScenario(f, cli.load);
    if (!r.loaded) {
      printErrors(r.errors);
      rc = kExitUsage;
    } else {
      loaded->emplace_back(f, std::move(*r.loaded));
    }
  }
  return rc;
}

int validate(const Cli& cli) {
  std::vector<std::pair<std::string, LoadedScenario>> loaded;
  int rc = loadAll(cli, &loaded);
  for (const auto& [f, l] : loaded) {
    const Scenario& s = l.scenario;
    std::printf("OK  %s: %s (%zu worlds, %zu roles, %zu faults, %.1f s)\n", f.c_str(),
                s.name.c_str(), s.worlds.size(), s.roles.size(), s.timeline.size(),
                static_cast<double>(s.duration.count()) / 1000.0);
  }
  return rc;
}

int run(const Cli& cli) {
  // Validate everything first: a typo in the tenth file should not wait for nine runs.
  std::vector<std::pair<std::string, LoadedScenario>> loaded;
  int rc = loadAll(cli, &loaded);
  if (rc != kExitPass) return rc;
  const std::string worker = workerPath(cli);
  if (::access(worker.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "mwchaos: the worker program %s is missing or not executable (build "
                 "the mw_worker target, or pass --worker PATH)\n",
                 worker.c_str());
    return kExitUnavailable;
  }
  const fs::path out = cli.out.empty() ? fs::path("mwchaos-out") : fs::path(cli.out);
  const int gpus = gpuCount();
  const json env = environment(cli, gpus);
  RunOptions ro;
  ro.worker_path = worker;
  ro.verbosity = cli.verbosity;
  ro.tty = ::isatty(2) != 0;
  ro.interrupted = &interrupted;
  ro.gpus = gpus;
  std::vector<json> docs;
  std::set<std::string> used;
  bool all_written = true;  // a gate must not pass on a report that is not there
  for (auto& [file, l] : loaded) {
    const Scenario& s = l.scenario;
    RunResult res;
    std::string outcome = "completed";
    std::vector<Verdict> verdicts;
    try {
      res = runScenario(s, ro);
      if (res.outcome == RunOutcome::kUnavailable) {
        outcome = "unavailable";
      } else if (res.outcome == RunOutcome::kInterrupted) {
        outcome = "interrupted";
      } else if (res.outcome == RunOutcome::kHarnessError) {
        outcome = "harness_error";
      } else {
        verdicts = evaluate(s, res.record);
        if (s.expect.has_check) {
          auto [ok, msg] = l.callCheck(mw::reports::runJson(s, res.record).dump());
          verdicts.push_back(
              {"expect.check hook", "", ok ? "pass" : "fail", "", "", msg, s.expect.where});
        }
      }
    } catch (const std::exception& e) {  // a bug of the harness: still a report that says so
      outcome = "harness_error";
      res.outcome = RunOutcome::kHarnessError;
      res.why = std::string("internal error of the harness: ") + e.what();
      verdicts.clear();
    }
    json doc = mw::reports::reportJson(s, res.record, verdicts, outcome, res.why, env);
    std::string folder = folderName(s.file, s.name);
    while (used.count(folder)) folder += "_";
    used.insert(folder);
    const bool written = writeReports(cli, out / folder, doc);
    all_written = all_written && written;
    printVerdict(doc, out / folder, cli, written);
    if (cli.formats.count("github"))
      std::fputs(mw::reports::githubAnnotations(doc).c_str(), stdout);
    docs.push_back(doc);
    const std::string v = mw::reports::verdictOf(doc);
    rc = combine(rc, v == "pass" ? kExitPass : v == "skipped" ? kExitUnavailable : kExitFail);
    if (res.outcome == RunOutcome::kInterrupted) {
      std::fprintf(stderr, "mwchaos: interrupted; every worker was stopped\n");
      if (cli.formats.count("junit")) writeFile(out / "junit.xml", mw::reports::junitXml(docs));
      return kExitInterrupted;
    }
  }
  if (cli.formats.count("junit")) {
    std::error_code ec;
    fs::create_directories(out, ec);
    all_written = writeFile(out / "junit.xml", mw::reports::junitXml(docs)) && all_written;
  }
  if (std::string why;
      cli.formats.count("github") && !mw::reports::appendGithubSummary(docs, &why)) {
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
  json doc;
  try {
    doc = json::parse(f);
    Scenario s = mw::reports::scenarioFromJson(doc);
    RunRecord r = mw::reports::runFromJson(doc);
    const std::string outcome = doc.value("outcome", std::string("completed"));
    std::vector<Verdict> verdicts;
    if (outcome == "completed") {
      verdicts = evaluate(s, r);
      // A Lua hook cannot run again without its scenario: keep its saved verdict.
      for (const auto& v : mw::reports::verdictsFromJson(doc)) {
        if (v.name == "expect.check hook") verdicts.push_back(v);
      }
    }
    json fresh = mw::reports::reportJson(s, r, verdicts, outcome, doc.value("why", std::string()),
                                         doc.value("environment", json::object()));
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
    const std::string v = mw::reports::verdictOf(fresh);
    return v == "pass" ? kExitPass : v == "skipped" ? kExitUnavailable : kExitFail;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mwchaos: %s: %s\n", path.c_str(), e.what());
    return kExitUsage;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli;
  if (int rc = parse(argc, argv, cli); rc >= 0) return rc;
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
    if (cli.command == "report") return report(cli);
    return run(cli);
  } catch (const std::exception& e) {  // never an abort: a gate reads the exit code
    std::fprintf(stderr, "mwchaos: internal error: %s\n", e.what());
    return kExitUnavailable;
  }
}
