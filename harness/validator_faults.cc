#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include "chaos/posix_points.h"
#include "harness/fault_names.h"
#include "harness/validator.h"
#include "model/nemesis.h"
#include "model/net_words.h"

namespace mw::harness {

// A signal by name ("SIGKILL", "KILL") or number ("9"): any signal of this system. 0 if unknown.
int signalNumber(const std::string& text, std::string* canonical) {
  std::string name = text.rfind("SIG", 0) == 0 ? text.substr(3) : text;
  char* end = nullptr;
  long n = std::strtol(text.c_str(), &end, 10);
  for (int s = 1; s < NSIG; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev == nullptr) continue;
    if ((*end == '\0' && !text.empty() && n == s) || name == abbrev) {
      *canonical = std::string("SIG") + abbrev;
      return s;
    }
  }
  return 0;
}

namespace loader {

void Validator::timeline(const LV* v, const std::string& w, Scenario& s) {
  if (v == nullptr) return;
  if (v->t != LV::T::kTable || !v->fields.empty()) {
    error(w, "timeline: expected a list like { at(\"2s\", kill(\"b\")) }");
    return;
  }
  for (size_t i = 0; i < v->items.size(); ++i) {
    const LV& a = v->items[i];
    const std::string path = "timeline[" + std::to_string(i + 1) + "]";
    const std::string aw = a.whereTag(w);
    if (a.t != LV::T::kTable || a.kindTag() != "at") {
      error(aw, path + ": expected at(time, action)");
      continue;
    }
    auto t = duration(a.get("time"), aw, path + " time", Ms(0), kMaxTime);
    const LV* act = a.get("action");
    if (act == nullptr || act->t != LV::T::kTable || act->kindTag().empty() ||
        act->kindTag() == "at") {
      error(aw, path + ": at(time, action) needs an action such as kill(\"b\")");
      continue;
    }
    const std::string kind = act->kindTag();
    auto fk = parseFaultKind(kind);
    if (!fk) {
      error(aw, path + ": unknown action " + kind);
      continue;
    }
    if (t && *t > s.duration) {
      error(aw, path + ": at " + std::to_string(t->count()) +
                    " ms is past the end of the scenario (duration " +
                    std::to_string(s.duration.count()) + " ms)");
    }
    ActionSpec as;
    as.at = t.value_or(Ms(0));
    as.where = act->whereTag(aw);
    as.fault = *fk >= FaultKind::kPartition ? network(*fk, *act, aw, path, s)
                                            : roleFaultOf(*fk, *act, aw, path, s);
    s.timeline.push_back(std::move(as));
  }
  std::stable_sort(s.timeline.begin(), s.timeline.end(),
                   [](const ActionSpec& a, const ActionSpec& b) { return a.at < b.at; });
}

std::string Validator::signalText(const LV& act, const std::string& aw, const std::string& path,
                                  const std::string& fallback) {
  const LV* v = act.get("signal");
  if (v == nullptr || v->t == LV::T::kNil) return fallback;
  if (v->t == LV::T::kNum) {
    auto n = whole(v, aw, path + " signal", 1, NSIG - 1);
    return n ? std::to_string(*n) : fallback;  // a number in range but unknown is refused later
  }
  return str(v, aw, path + " signal").value_or(fallback);
}

ScancelStep Validator::scancelStep(const LV& act, const std::string& aw, const std::string& path,
                                   const Scenario& s, const std::string& role) {
  ScancelStep f{role};
  const std::string sig = signalText(act, aw, path, "");
  if (!sig.empty()) {
    f.signal = signalNumber(sig, &f.signal_name);
    // The step's processes get the signal, its agent among them: only a signal that ends a
    // process by default, or one the agent ends on (TERM, INT, HUP), ends the step.
    static const std::set<int> kEnding = {SIGKILL, SIGTERM, SIGINT,  SIGHUP,
                                          SIGQUIT, SIGABRT, SIGUSR1, SIGUSR2};
    if (f.signal == 0) {
      error(aw, path + ": scancel_step: unknown signal \"" + sig + "\"");
    } else if (!kEnding.count(f.signal)) {
      error(aw, path + ": scancel_step: " + f.signal_name +
                    " does not end a step (its agent would stop or go on, not the role alone); "
                    "use KILL, TERM, INT, HUP, QUIT, ABRT, USR1 or USR2, or pause(role) and "
                    "kill(role, signal) for a role's process");
    }
  }
  auto r = s.roles.find(role);
  if (r == s.roles.end()) return f;
  const std::string& host = r->second.host;
  if (host.empty()) {
    error(aw, path + ": scancel_step: role '" + role +
                  "' has no host; a Slurm step holds a host's agent, so the role needs one "
                  "(host = \"h1\")");
    return f;
  }
  std::string others;
  for (const auto& [name, other] : s.roles) {
    if (name != role && other.host == host) others += (others.empty() ? "" : ", ") + name;
  }
  if (!others.empty()) {
    error(aw, path + ": scancel_step: role '" + role + "' shares host '" + host + "' with " +
                  others +
                  "; one srun step holds all of a host's roles, so cancelling it would "
                  "end them all: give '" +
                  role + "' a host of its own");
  }
  return f;
}

Fault Validator::roleFaultOf(FaultKind kind, const LV& act, const std::string& aw,
                             const std::string& path, const Scenario& s) {
  const std::string role = str(act.get("role"), aw, path + " role").value_or("");
  const std::string name = faultKindName(kind);
  if (!s.roles.count(role)) error(aw, path + ": " + name + ": no role '" + role + "' in roles");
  const bool program = s.roles.count(role) && s.roles.at(role).isProgram();
  if (program && (kind == FaultKind::kRemoveWorld || kind == FaultKind::kAddWorld)) {
    error(aw, path + ": " + name + ": role '" + role +
                  "' runs a program; remove_world and add_world are commands to mw_worker");
  }
  if (program && (kind == FaultKind::kFailpoint || kind == FaultKind::kClearFailpoint)) {
    // The runtime's points work in a program (MW_FAILPOINT_FIFO); libfiu's POSIX preload is
    // mw_worker's alone.
    const LV* point = act.get("point");
    if (point != nullptr && point->t == LV::T::kStr && chaos::isPosixPoint(point->s)) {
      error(aw, path + ": " + name + ": role '" + role + "' runs a program; POSIX failpoints (" +
                    point->s +
                    ") need mw_worker's libfiu preload, the runtime's mw/... points "
                    "work in programs");
    }
  }
  switch (kind) {
    case FaultKind::kKill: {
      Kill k{role};
      const std::string sig = signalText(act, aw, path, "SIGKILL");
      k.signal = signalNumber(sig, &k.signal_name);
      if (k.signal == 0) error(aw, path + ": kill: unknown signal \"" + sig + "\"");
      return k;
    }
    case FaultKind::kScancelStep:
      return scancelStep(act, aw, path, s, role);
    case FaultKind::kPause:
      return Pause{role};
    case FaultKind::kResume:
      return Resume{role};
    case FaultKind::kRestart:
      return Restart{role};
    case FaultKind::kFailpoint:
    case FaultKind::kClearFailpoint:
      return failpoint(kind, act, aw, path, s, role);
    default: {  // remove_world, add_world
      const std::string world = str(act.get("world"), aw, path + " world").value_or("");
      auto r = s.roles.find(role);
      if (r != s.roles.end() && !r->second.ranks.count(world)) {
        error(aw, path + ": " + name + ": role '" + role + "' is not a member of world '" + world +
                      "'");
      }
      if (kind == FaultKind::kRemoveWorld) return RemoveWorld{role, world};
      return AddWorld{role, world};
    }
  }
}

Fault Validator::failpoint(FaultKind kind, const LV& act, const std::string& aw,
                           const std::string& path, const Scenario& s, const std::string& role) {
  std::string point = str(act.get("point"), aw, path + " point").value_or("");
  if (point.empty()) error(aw, path + ": " + faultKindName(kind) + " needs a point name");
  FailMode mode;
  if (chaos::isPosixPoint(point)) {
    if (auto why = chaos::checkPosixPoint(point); !why.empty()) {
      error(aw, path + ": " + why);
    } else if (kind == FaultKind::kFailpoint) {
      posixMode(act.get("mode"), aw, path, point, mode);
    }
  } else {
    if (kind == FaultKind::kFailpoint) failMode(act.get("mode"), aw, path, mode);
    expandBackend(s, role, point, mode);
  }
  if (kind == FaultKind::kClearFailpoint) return ClearFailpoint{role, point};
  return Failpoint{role, point, mode};
}

Fault Validator::network(FaultKind kind, const LV& act, const std::string& aw,
                         const std::string& path, const Scenario& s) {
  const std::string name = faultKindName(kind);
  std::set<std::string> hosts;
  for (const auto& h : s.hosts()) hosts.insert(h);
  if (hosts.empty()) {
    error(aw, path + ": " + name +
                  " needs simulated hosts: give each role a host, like "
                  "roles = { a = { host = \"h1\", ... } }");
    return Heal{};
  }
  auto knownHost = [&](const std::string& h, const std::string& p) {
    if (!hosts.count(h))
      error(aw, path + ": " + name + ": no role is on host '" + h + "' (" + p + ")");
  };
  if (kind == FaultKind::kPartition) {
    onlyFields(act, aw, path + " partition", {"a", "b", "mode", "oneway"});
    Partition p;
    p.a = strList(act.get("a"), aw, path + " partition.a");
    p.b = strList(act.get("b"), aw, path + " partition.b");
    if (p.a.empty() || p.b.empty()) {
      error(aw, path + ": partition { a = { hosts }, b = { hosts } } needs both sides");
    }
    for (const auto& h : p.a) knownHost(h, "partition.a");
    for (const auto& h : p.b) knownHost(h, "partition.b");
    std::string mode = str(act.get("mode"), aw, path + " partition.mode").value_or("silent");
    if (mode != "silent" && mode != "loud") {
      error(aw, path + ": partition.mode: expected \"silent\" (drop) or \"loud\" (reset), got \"" +
                    mode + "\"");
    }
    p.loud = mode == "loud";
    p.oneway = boolean(act.get("oneway"), aw, path + " partition.oneway").value_or(false);
    return p;
  }
  if (kind == FaultKind::kHeal) return Heal{};
  const std::string host = str(act.get("host"), aw, path + " host").value_or("");
  knownHost(host, "host");
  if (kind == FaultKind::kLoss) {
    auto p = number(act.get("p"), aw, path + " loss probability", 0, 1);
    if (act.get("p") == nullptr || (p && (*p == 0 || *p == 1))) {  // else number() said why
      error(aw, path + ": loss(host, p): p must be a probability in (0, 1), like 0.2");
    }
    return Loss{host, p.value_or(0)};
  }
  if (kind == FaultKind::kBandwidth) {
    Bandwidth b{host, str(act.get("rate"), aw, path + " bandwidth rate").value_or("")};
    if (!isTcRate(b.rate)) {
      error(aw, path +
                    ": bandwidth(host, rate): rate like \"10mbit\" or \"1gbit\" (a number and a " +
                    "unit), got \"" + b.rate + "\"");
    }
    return b;
  }
  Delay d{host};  // delay
  // Within kMaxTime, a delay in milliseconds fits an int.
  const LV* given = act.get("delay");
  const auto delay = duration(given, aw, path + " delay", Ms(0), kMaxTime);
  d.delay_ms = static_cast<int>(delay.value_or(Ms(0)).count());
  d.jitter_ms = static_cast<int>(
      duration(act.get("jitter"), aw, path + " jitter", Ms(0), kMaxTime).value_or(Ms(0)).count());
  if (given == nullptr || (delay && d.delay_ms == 0)) {  // else duration() said why
    error(aw, path + ": delay(host, d [, jitter]): d like \"50ms\"");
  }
  return d;
}

void Validator::nemesis(const LV* v, const std::string& w, Scenario& s) {
  if (v == nullptr) return;
  if (v->t != LV::T::kTable) {
    error(w,
          "nemesis: expected a table like { faults = { \"partition\", \"pause\" }, gap = \"1s\" }");
    return;
  }
  onlyFields(*v, w, "nemesis",
             {"faults", "start", "stop", "gap", "hold", "roles", "hosts", "loss"});
  NemesisSpec& n = s.nemesis;
  n.enabled = true;
  n.faults = strList(v->get("faults"), w, "nemesis.faults");
  static const std::set<std::string> kinds = {"partition", "loss", "pause", "kill"};
  for (const auto& f : n.faults) {
    if (!kinds.count(f))
      error(w, "nemesis.faults: unknown fault \"" + f + "\" (partition, loss, pause, kill)");
  }
  if (n.faults.empty())
    error(w, "nemesis.faults: name at least one of partition, loss, pause, kill");
  n.start = duration(v->get("start"), w, "nemesis.start", Ms(0), kMaxTime).value_or(s.warmup);
  n.stop =
      duration(v->get("stop"), w, "nemesis.stop", Ms(0), kMaxTime).value_or(s.duration - Ms(1000));
  n.gap = duration(v->get("gap"), w, "nemesis.gap", Ms(50), kMaxTime).value_or(Ms(1000));
  n.hold = duration(v->get("hold"), w, "nemesis.hold", Ms(10), kMaxTime).value_or(Ms(300));
  n.loss = number(v->get("loss"), w, "nemesis.loss", 0, 1).value_or(0.1);
  if (n.loss == 0 || n.loss == 1) error(w, "nemesis.loss: must be a probability in (0, 1)");
  n.roles = strList(v->get("roles"), w, "nemesis.roles");
  n.hosts = strList(v->get("hosts"), w, "nemesis.hosts");
  if (n.roles.empty()) {
    for (const auto& [name, r] : s.roles) n.roles.push_back(name);
  }
  if (n.hosts.empty()) n.hosts = s.hosts();
  for (const auto& r : n.roles) {
    if (!s.roles.count(r)) error(w, "nemesis.roles: no role '" + r + "' in roles");
  }
  const bool net = std::any_of(n.faults.begin(), n.faults.end(), [](const std::string& f) {
    return f == "partition" || f == "loss";
  });
  if (net && s.hosts().size() < 2) {
    error(w, "nemesis.faults: partition and loss need roles on at least two simulated hosts");
  }
  if (n.stop > s.duration || n.start >= n.stop) {
    error(w, "nemesis: start and stop must lie within the duration, start before stop");
  }
  if (!errors.empty()) return;
  auto drawn = drawNemesis(n, s.seed, s.hosts(), w, kMaxNemesisFaults + 1);
  if (drawn.size() > 2 * kMaxNemesisFaults) {
    error(w, "nemesis: draws more than " + std::to_string(kMaxNemesisFaults) + " faults from " +
                 timeText(n.start) + " to " + timeText(n.stop) + " with a gap of " +
                 timeText(n.gap) + " and a hold of " + timeText(n.hold) + "; give a longer gap");
    return;
  }
  for (auto& a : drawn) s.timeline.push_back(std::move(a));
  std::stable_sort(s.timeline.begin(), s.timeline.end(),
                   [](const ActionSpec& a, const ActionSpec& b) { return a.at < b.at; });
}

void Validator::expandBackend(const Scenario& s, const std::string& role, std::string& point,
                              FailMode& mode) {
  std::string world = point.substr(point.rfind('/') + 1);
  auto it = s.worlds.find(world);
  if (it == s.worlds.end()) {
    auto r = s.roles.find(role);
    if (r != s.roles.end() && !r->second.ranks.empty())
      it = s.worlds.find(r->second.ranks.begin()->first);
  }
  const std::string backend =
      backendName(it != s.worlds.end() ? it->second.backend : BackendKind::kGloo);
  for (size_t p; (p = point.find("{backend}")) != std::string::npos;) {
    point.replace(p, 9, backend);
  }
  // A point written for NCCL (mw/nccl/...) on a world that runs on Gloo.
  if (backend == "gloo" && point.rfind("mw/nccl/", 0) == 0) {
    point = "mw/gloo/" + point.substr(8);
    if (!mode.nccl.empty()) {
      for (const auto& n : kNcclResults) {
        if (mode.nccl == n.name) mode.failnum = n.gloo_errno;
      }
      mode.failinfo = 0;
    }
  }
}

std::optional<int> Validator::errnoField(const LV& m, const std::string& aw,
                                         const std::string& path, std::string* name) {
  auto e = str(m.get("errno"), aw, path + " mode.errno");
  if (!e) return std::nullopt;
  *name = *e;
  for (const auto& k : kErrnos) {
    if (*e == k.name) return k.number;
  }
  error(aw, path + ": failpoint mode.errno: unknown errno \"" + *e + "\"");
  return std::nullopt;
}

void Validator::probabilityAndOnce(const LV& m, const std::string& aw, const std::string& path,
                                   FailMode& f) {
  f.probability = number(m.get("probability"), aw, path + " mode.probability", 0, 1).value_or(1.0);
  if (f.probability == 0) {
    error(aw, path + ": failpoint mode.probability: must be in (0, 1]");
  }
  f.once = boolean(m.get("once"), aw, path + " mode.once").value_or(false);
}

void Validator::failMode(const LV* m, const std::string& aw, const std::string& path, FailMode& f) {
  if (m == nullptr) return;
  if (m->t != LV::T::kTable) {
    error(aw, path + ": failpoint mode: expected a table like { errno = \"ECONNRESET\" }");
    return;
  }
  onlyFields(*m, aw, path + " mode", {"errno", "nccl", "failnum", "async", "probability", "once"});
  if (auto e = errnoField(*m, aw, path, &f.errno_name)) f.failnum = *e;
  if (auto n = str(m->get("nccl"), aw, path + " mode.nccl")) {
    f.nccl = *n;
    for (const auto& k : kNcclResults) {
      if (*n == k.name) f.failnum = k.number;
    }
    if (f.failnum == 0)
      error(aw, path + ": failpoint mode.nccl: unknown NCCL result \"" + *n + "\"");
  }
  if (auto n = whole(m->get("failnum"), aw, path + " mode.failnum", INT_MIN, INT_MAX)) {
    f.failnum = static_cast<int>(*n);
  }
  if (f.failnum == 0) f.failnum = EIO;
  f.failinfo = boolean(m->get("async"), aw, path + " mode.async").value_or(false) ? 1 : 0;
  probabilityAndOnce(*m, aw, path, f);
}

void Validator::posixMode(const LV* m, const std::string& aw, const std::string& path,
                          const std::string& point, FailMode& f) {
  const std::string example = "{ errno = \"ECONNRESET\" }";
  if (m == nullptr || m->t != LV::T::kTable) {
    error(aw, path + ": POSIX failpoint " + point + " needs a mode like " + example +
                  ": the errno its call fails with");
    return;
  }
  onlyFields(*m, aw, path + " mode", {"errno", "probability", "once"});
  if (auto e = errnoField(*m, aw, path, &f.errno_name)) {
    f.failinfo = static_cast<uintptr_t>(*e);
  } else if (f.errno_name.empty()) {
    error(aw, path + ": POSIX failpoint " + point + " needs mode.errno, as in " + example);
  }
  f.failnum = 1;  // the preload only asks whether the point fails; the errno is the failinfo
  probabilityAndOnce(*m, aw, path, f);
}

}  // namespace loader
}  // namespace mw::harness
