// The scenario model: what a scenario file (scenarios/*.lua, docs/scenarios.md) asks for, after
// validation. Every element keeps `where`, the "file:line" it was written at, for messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "chaos/worker_config.h"
#include "multiworld/tensor.h"
#include "multiworld/world_manager.h"

namespace mw::harness {

using Ms = std::chrono::milliseconds;

struct Scenario;

struct WorldSpec {
  std::string name;
  BackendKind backend = BackendKind::kGloo;
  int size = 0;  // derived from the roles' ranks
  Ms heartbeat{1000};
  Ms op_timeout{10000};
  // Whether the scenario wrote them (else the defaults above, which the harness's own workers
  // use): a program role's world options are judged only on what the scenario declares.
  bool heartbeat_declared = false;
  bool op_timeout_declared = false;
  bool rejoin = false;  // members re-create the world after it breaks (replacement members)
  bool start = true;    // joined at start; false: only by an add_world action
  std::string where;
};

struct RoleSpec {
  std::string name;
  std::map<std::string, int> ranks;  // world -> this role's rank there
  std::string device = "auto";       // auto | cpu | gpu | cuda:N
  std::string host;                  // simulated host (network namespace); "" for none
  // A program role (docs/scenarios.md, "Program roles") runs this command instead of mw_worker:
  // argv as written, placeholders unexpanded; empty for an mw_worker role.
  std::vector<std::string> program;
  std::string executable;                  // program[0] resolved to a path (validation)
  std::map<std::string, std::string> env;  // extra variables, values unexpanded
  std::string cwd;                         // absolute working directory of a program role
  // How long the role's process has to exit once told to stop at the end of the run before it is
  // killed and judged hung (`stop_within`, docs/scenarios.md "How a program is stopped"): a
  // program role may give its own (a torch program's interpreter takes seconds to exit);
  // an mw_worker role keeps the default.
  Ms stop_within{kDefaultStopWithin};
  std::string where;

  static constexpr Ms kDefaultStopWithin{5000};
  bool isProgram() const { return !program.empty(); }
};

// The variables the harness gives a program role's process itself (a role's env may not set them):
// the telemetry pipe's fd, the worlds it reports, the role's name and the run's store token.
inline constexpr std::string_view kHarnessVariables[] = {
    "MW_TELEMETRY_FD",   "MW_TELEMETRY_WORLDS", "MW_CHAOS_ROLE",         "MW_CHAOS_STORE_TOKEN",
    "MW_FAILPOINT_FIFO", "MW_FAILPOINT_SEED",   "MW_CHAOS_WORLD_OPTIONS"};

// The options every member of world `w` joins with, as the runtime's `created` telemetry event
// names them (runtime/src/worlds/telemetry.h, optionsText): "backend=gloo device=cpu
// heartbeat_ms=500 op_timeout_ms=10000", with `device` the role's device in that world.
std::string worldOptionsText(const WorldSpec& w, const std::string& device);

// The options of a `created` event's detail that differ from what the scenario declares for world
// `w` (role device `device`), one "KEY: joined with A, the scenario declares B" each; empty when
// they agree. Keys the detail does not name are not judged (an older runtime names none), nor a
// heartbeat or op_timeout the scenario does not write (a program keeps its own then).
std::vector<std::string> optionMismatches(const WorldSpec& w, const std::string& device,
                                          const std::string& detail);

// What a program role's placeholders stand for in a run: each world's store address and port,
// and the device the role's tensors of that world live on.
struct StoreAddress {
  std::string addr = "127.0.0.1";
  uint16_t port = 0;
  std::string device = "cpu";  // "cpu" or "cuda:N" (nccl worlds: the role's GPU)
};

// Expands the placeholders of `text` (a program role's argument or environment value) for role `r`:
// ${world.NAME.addr}, ${world.NAME.port}, ${world.NAME.rank}, ${world.NAME.size},
// ${world.NAME.backend}, ${world.NAME.device}, ${world.NAME.heartbeat_ms},
// ${world.NAME.op_timeout_ms}, ${token} and ${role}. `stores` gives the store of each of r's
// worlds (a world missing from it gets the defaults: what validation uses). Returns nullopt, with
// *error naming the placeholder, for an unknown placeholder, a world `r` is not a member of, or a
// "${" without its "}".
// REQUIRES: every world of r.ranks is in s.worlds.
std::optional<std::string> expandPlaceholders(const std::string& text, const Scenario& s,
                                              const RoleSpec& r,
                                              const std::map<std::string, StoreAddress>& stores,
                                              const std::string& token, std::string* error);

struct TrafficSpec {
  chaos::TrafficPattern pattern = chaos::TrafficPattern::kGatherToLeader;
  std::vector<std::string> worlds;
  uint64_t bytes = 1 << 20;
  DType dtype = DType::kFloat32;
  double rate = 0;  // operations per second per member; 0: as fast as possible
  int root = 0;
  std::string where;
};

struct FailMode {
  int failnum = 0;
  uintptr_t failinfo = 0;
  double probability = 1.0;
  bool once = false;
  std::string nccl;        // the NCCL result asked for, when any ("ncclRemoteError")
  std::string errno_name;  // the errno asked for, when any ("ECONNRESET")
};

// The faults a timeline can hold, one type each (docs/scenarios.md, "Faults").
// On a role's process:
struct Kill {
  std::string role;
  int signal = 9;
  std::string signal_name = "SIGKILL";
};
struct Pause {
  std::string role;
};
struct Resume {
  std::string role;
};
struct Restart {
  std::string role;
};
struct Failpoint {
  std::string role;
  std::string point;  // after {backend} expansion
  FailMode mode;
};
struct ClearFailpoint {
  std::string role;
  std::string point;
};
struct RemoveWorld {
  std::string role;
  std::string world;
};
struct AddWorld {
  std::string role;
  std::string world;
};
// Slurm's own cancel of the srun step that holds the role's host agent, through slurmctld
// (`scancel JOB.STEP`, or `scancel --signal=SIG JOB.STEP` when a signal is named): the role, alone
// on its host, ends with the step. Only with the slurm launcher (docs/hosts.md).
struct ScancelStep {
  std::string role;
  int signal = 0;           // 0: Slurm's cancel (SIGCONT, SIGTERM, SIGKILL after KillWait)
  std::string signal_name;  // "" with signal 0
};
// On simulated hosts:
struct Partition {
  std::vector<std::string> a, b;  // from a to b (and back unless oneway)
  bool loud = false;              // reset connections instead of dropping silently
  bool oneway = false;
};
struct Heal {};
struct Loss {
  std::string host;
  double p = 0;  // probability of dropping a packet
};
struct Bandwidth {
  std::string host;
  std::string rate;  // tc syntax ("10mbit")
};
struct Delay {
  std::string host;
  int delay_ms = 0, jitter_ms = 0;
};

using Fault = std::variant<Kill, Pause, Resume, Restart, Failpoint, ClearFailpoint, RemoveWorld,
                           AddWorld, ScancelStep, Partition, Heal, Loss, Bandwidth, Delay>;

// The kinds of Fault, in the order of its alternatives: FaultKind(fault.index()).
enum class FaultKind : uint8_t {
  kKill,
  kPause,
  kResume,
  kRestart,
  kFailpoint,
  kClearFailpoint,
  kRemoveWorld,
  kAddWorld,
  kScancelStep,
  kPartition,
  kHeal,
  kLoss,
  kBandwidth,
  kDelay,
};
inline constexpr size_t kFaultKinds = std::variant_size_v<Fault>;

// The name a scenario calls the fault by ("kill", "clear_failpoint", "partition", ...).
const char* faultKindName(FaultKind k);
// The kind called `name`, or nullopt.
std::optional<FaultKind> parseFaultKind(std::string_view name);

// One timeline entry: a fault at a time.
struct ActionSpec {
  Ms at{0};
  Fault fault;
  std::string where;

  FaultKind kind() const { return static_cast<FaultKind>(fault.index()); }
  // A fault on simulated hosts (partition, heal, loss, bandwidth, delay), not on a role.
  bool network() const { return kind() >= FaultKind::kPartition; }
  // The role a process fault acts on; "" for a network fault.
  const std::string& role() const;
  // One line for people: "kill leader SIGKILL".
  std::string describe() const;
};

struct ThroughputSpec {
  std::string world;   // a world's bytes at its rank-0 role; or, when `metric` is set:
  std::string metric;  // a program role's own metric (multiworld/telemetry.h) ...
  std::string role;    // ... reported by this role
  double ratio = 0.9;
  std::string window = "after";  // after: from the first fault to the end
  std::string where;
};

struct ExpectSpec {
  bool has_broken = false;
  std::set<std::string> broken;   // exactly these worlds break
  std::set<std::string> healthy;  // these worlds do not break (the others are not judged)
  std::optional<Ms> detected_within;
  std::map<std::string, Ms> detected_within_world;
  std::vector<ThroughputSpec> throughput;
  std::optional<Ms> replacement_within;
  bool no_hang = true;
  bool no_orphans = true;
  // What the built-in traffic's receivers got is what was sent (data_intact): on unless turned
  // off, with the reason the scenario gives (data_intact = { off = "..." }).
  bool data_intact = true;
  std::string data_intact_off;
  bool data_intact_every_element = false;  // { every_element = true }: no sample
  // The programs' own checks (mw::reportCheck) must all have held (app_checks).
  bool app_checks = false;
  // False only for a report read back from before data_intact and app_checks existed: its run
  // recorded no checks, and judged again it has neither verdict nor their fields (model/report.h's
  // rejudge keeps such a report as it was).
  bool checks_recorded = true;
  bool has_check = false;  // a Lua check(run) hook
  std::string where;
};

// A seeded random fault schedule (docs/scenarios.md, "nemesis").
struct NemesisSpec {
  bool enabled = false;
  std::vector<std::string> faults;  // partition | loss | pause | kill
  Ms start{0}, stop{0}, gap{1000}, hold{300};
  double loss = 0.1;
  std::vector<std::string> roles;  // targets of pause and kill (default: every role)
  std::vector<std::string> hosts;  // targets of partition and loss (default: every host)
};

struct Scenario {
  std::string file;
  std::string name;
  std::string description;
  Ms duration{5000};
  Ms warmup{1000};
  Ms startup{60000};  // every role ready (joined its worlds) within this, or the run ends
  uint64_t seed = 1;
  std::map<std::string, WorldSpec> worlds;
  std::map<std::string, RoleSpec> roles;
  std::vector<TrafficSpec> traffic;
  std::vector<ActionSpec> timeline;  // sorted by time, the nemesis's drawn faults included
  NemesisSpec nemesis;
  ExpectSpec expect;
  std::string where;

  // The worlds a fault on `role` touches (every world the role is a member of).
  std::vector<std::string> worldsOf(const std::string& role) const;
  // The roles that are members of `world`, by rank.
  std::vector<std::string> membersOf(const std::string& world) const;
  // The simulated hosts the roles are placed on (empty: every role on this machine's loopback).
  std::vector<std::string> hosts() const;
  // The worlds a network fault touches: those with members on both sides of a partition, or a
  // member on the host of a loss, bandwidth or delay fault.
  std::vector<std::string> worldsTouchedBy(const ActionSpec& a) const;
  // How long `role`'s process has to exit once told to stop before it is killed and judged hung:
  // its stop_within (RoleSpec::kDefaultStopWithin for an mw_worker role, and for a name that is
  // no role of the scenario).
  Ms stopWithin(const std::string& role) const;
};

// The ranges of a scenario's numbers (docs/scenarios.md, "Limits"). Validation refuses a value
// outside its range with the file and line (exit 2), and the command line refuses --duration and
// --seed past them (exit 2), so that no arithmetic on them later overflows: a fault at 1e300 s
// once validated and then wrapped around to 0.001 s, and --duration 10000000h ran for 0.1 s.
//
// The longest time or duration anything takes: a scenario's duration (and --duration), a
// warm-up, an at() time, a heartbeat, an op_timeout, a nemesis's span, gap and hold, a delay, an
// expectation's deadline. A day is longer than any CI job runs, and a day in nanoseconds (8.64e13)
// is far inside the int64 clocks the harness adds these times to.
inline constexpr Ms kMaxTime{24LL * 3600 * 1000};
// The largest seed, in a scenario or --seed: 2^53 - 1, the largest whole number that a Lua number
// (a double, which scenario { seed = ... } passes through) and a JSON reader in any language hold
// exactly, so that the seed a report records replays the same run.
inline constexpr uint64_t kMaxSeed = (uint64_t{1} << 53) - 1;
// A traffic pattern's rate, in operations per second per member: 0 (as fast as it can), or from
// kMinRate (one operation in 1000 s: the worker sleeps 1 / rate between operations, a time that
// must stay well inside kMaxTime) to kMaxRate (one operation a microsecond, more than any backend
// completes).
inline constexpr double kMinRate = 1e-3;
inline constexpr double kMaxRate = 1e6;
// The most faults a nemesis may draw (each followed by its undo): 100,000 is a fault every 0.86 s
// of a 24 h soak; the planned timeline is held in memory and written into every report.
inline constexpr size_t kMaxNemesisFaults = 100000;

// The time parser. Parses "500ms", "1.5s", "2m", "1h", "250us" or a number of seconds, rounded to
// whole milliseconds, into a time in [lo, hi]. Returns nullopt when the text is malformed, or
// names NaN, an infinity, a negative time or one outside [lo, hi]; then *why (when given) says
// which, as `expected a duration like "500ms" or "2s", got "soon"` or as `"1e300s" is out of
// range (0 to 24 h)`. REQUIRES: Ms(0) <= lo <= hi <= kMaxTime.
std::optional<Ms> parseDuration(const std::string& text, std::string* why = nullptr, Ms lo = Ms(0),
                                Ms hi = kMaxTime);
// The same for a number of seconds (scenario { duration = 2.5 }): *why reads "1e+300 s is out of
// range (0 to 24 h)". REQUIRES: as for parseDuration.
std::optional<Ms> secondsToTime(double seconds, std::string* why = nullptr, Ms lo = Ms(0),
                                Ms hi = kMaxTime);
// A time for messages: "0", "250 ms", "2 s", "24 h".
std::string timeText(Ms t);
// A number for messages: whole numbers in full ("18446744073709551616"), others in the fewest
// digits that read back as `n` ("0.25", "86400.001", "1e+300", "inf", "nan").
std::string numberText(double n);

// Parses "1MiB", "256KiB", "4KB", "1GiB" or a number of bytes. nullopt when malformed, or when it
// is not below 2^64 bytes.
std::optional<uint64_t> parseBytes(const std::string& text);

}  // namespace mw::harness
