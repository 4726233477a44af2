#include "harness/validator.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "chaos/posix_points.h"
#include "chaos/process.h"
#include "harness/fault_names.h"
#include "model/nemesis.h"
#include "multiworld/telemetry.h"

namespace mw::harness::loader {

void Validator::error(const std::string& where, const std::string& msg) {
  std::string line = refine(where, msg) + ": " + msg;
  for (size_t p = 0; (p = line.find('\0', p)) != std::string::npos; p += 2) {
    line.replace(p, 1, "\\0");
  }
  errors.push_back(std::move(line));
}

std::string Validator::refine(const std::string& where, const std::string& msg) {
  size_t colon = where.rfind(':');
  if (colon == std::string::npos) return where;
  const std::string file = where.substr(0, colon);
  int line = std::atoi(where.c_str() + colon + 1);
  std::string path = msg.substr(0, msg.find(": "));
  path = path.substr(0, path.find(' '));
  size_t dot = path.rfind('.');
  std::string field = dot == std::string::npos ? path : path.substr(dot + 1);
  field = field.substr(0, field.find('['));
  if (field.empty() || line <= 0 || !std::isalpha(static_cast<unsigned char>(field[0]))) {
    return where;
  }
  if (lines_.empty()) {
    std::ifstream in(file);
    for (std::string l; std::getline(in, l);) lines_.push_back(l);
  }
  for (size_t i = static_cast<size_t>(line - 1); i < lines_.size(); ++i) {
    const std::string& l = lines_[i];
    for (size_t p = l.find(field); p != std::string::npos; p = l.find(field, p + 1)) {
      auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
      bool starts = p == 0 || !word(l[p - 1]);
      size_t q = p + field.size();
      while (q < l.size() && (l[q] == ' ' || l[q] == '\t')) ++q;
      bool assigned = q < l.size() && l[q] == '=' && (q + 1 >= l.size() || l[q + 1] != '=');
      if (starts && assigned) return file + ":" + std::to_string(i + 1);
    }
  }
  return where;
}

void Validator::onlyFields(const LV& t, const std::string& where, const std::string& path,
                           std::initializer_list<const char*> allowed) {
  for (const auto& field : t.fields) {
    const std::string& k = field.first;
    if (k == "__kind" || k == "__where") continue;
    bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; });
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      error(where, path + (path.empty() ? "" : ".") + k +
                       ": unknown field (expected one of: " + list + ")");
    }
  }
  if (!t.items.empty()) error(where, path + ": expected named fields, not a list");
}

std::optional<Ms> Validator::duration(const LV* v, const std::string& where,
                                      const std::string& path, Ms lo, Ms hi) {
  if (v == nullptr) return std::nullopt;
  std::optional<Ms> d;
  std::string why = "expected a duration like \"500ms\" or \"2s\", got " + v->show();
  if (v->t == LV::T::kStr) d = parseDuration(v->s, &why, lo, hi);
  if (v->t == LV::T::kNum) d = secondsToTime(v->n, &why, lo, hi);
  if (!d) error(where, path + ": " + why);
  return d;
}

std::optional<double> Validator::number(const LV* v, const std::string& where,
                                        const std::string& path, double lo, double hi,
                                        const std::string& unit) {
  auto n = typed<double>(
      v, LV::T::kNum, [](const LV& x) { return x.n; }, "a number", where, path);
  if (n && !(*n >= lo && *n <= hi)) {  // NaN too
    error(where, path + ": " + numberText(*n) + " is out of range (" + numberText(lo) + " to " +
                     numberText(hi) + (unit.empty() ? "" : " " + unit) + ")");
    return std::nullopt;
  }
  return n;
}

std::optional<int64_t> Validator::whole(const LV* v, const std::string& where,
                                        const std::string& path, int64_t lo, int64_t hi) {
  auto n = number(v, where, path, static_cast<double>(lo), static_cast<double>(hi));
  if (!n) return std::nullopt;
  if (*n != std::floor(*n)) {
    error(where, path + ": expected a whole number, got " + numberText(*n));
    return std::nullopt;
  }
  return static_cast<int64_t>(*n);  // exact: within [lo, hi], both within 2^53
}

bool Validator::noNul(const std::string& text, const std::string& where, const std::string& path) {
  if (text.find('\0') == std::string::npos) return true;
  error(where, path + ": \"" + text + "\" holds a NUL byte (a C string would end there)");
  return false;
}

std::optional<std::string> Validator::str(const LV* v, const std::string& where,
                                          const std::string& path) {
  auto s = typed<std::string>(
      v, LV::T::kStr, [](const LV& x) { return x.s; }, "a string", where, path);
  if (s && !noNul(*s, where, path)) return std::nullopt;
  return s;
}

std::optional<bool> Validator::boolean(const LV* v, const std::string& where,
                                       const std::string& path) {
  return typed<bool>(
      v, LV::T::kBool, [](const LV& x) { return x.b; }, "true or false", where, path);
}

std::vector<std::string> Validator::strList(const LV* v, const std::string& where,
                                            const std::string& path) {
  std::vector<std::string> out;
  if (v == nullptr) return out;
  if (v->t == LV::T::kStr) return {v->s};
  if (v->t != LV::T::kTable || !v->fields.empty()) {
    error(where, path + ": expected a list of names like { \"w1\", \"w2\" }, got " + v->show());
    return out;
  }
  for (size_t i = 0; i < v->items.size(); ++i) {
    auto s = str(&v->items[i], where, path + "[" + std::to_string(i + 1) + "]");
    if (s) out.push_back(*s);
  }
  return out;
}

Scenario Validator::scenario(const LV& t) {
  Scenario s;
  s.file = file_;
  const std::string w = t.whereTag(file_ + ":1");
  s.where = w;
  onlyFields(t, w, "",
             {"name", "description", "duration", "warmup", "startup", "seed", "worlds", "roles",
              "traffic", "timeline", "nemesis", "expect"});
  s.name = str(t.get("name"), w, "name").value_or("");
  if (s.name.empty()) error(w, "name: every scenario needs a name");
  s.description = str(t.get("description"), w, "description").value_or("");
  s.duration = duration(t.get("duration"), w, "duration", Ms(500), kMaxTime).value_or(Ms(5000));
  s.warmup = duration(t.get("warmup"), w, "warmup")
                 .value_or(Ms(std::min<long long>(1000, s.duration.count() / 4)));
  if (opts_.duration && (*opts_.duration < Ms(500) || *opts_.duration > kMaxTime)) {
    error(w, "--duration: " + timeText(*opts_.duration) + " is out of range (500 ms to " +
                 timeText(kMaxTime) + ")");
  } else if (opts_.duration && *opts_.duration != s.duration) {
    // The name may speak of the file's duration ("... for 60 s"): a report says what ran.
    const long long ms = opts_.duration->count();
    s.name += " [run for " +
              (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") +
              " by --duration]";
    s.duration = *opts_.duration;
  }
  if (s.warmup >= s.duration) error(w, "warmup: must be shorter than the duration");
  s.startup =
      duration(t.get("startup"), w, "startup", Ms(100), Ms(3600 * 1000)).value_or(Ms(60000));
  const auto max_seed = static_cast<int64_t>(kMaxSeed);
  if (auto seed = whole(t.get("seed"), w, "seed", 0, max_seed)) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  if (opts_.seed && *opts_.seed > kMaxSeed) {
    error(w, "--seed: " + std::to_string(*opts_.seed) + " is out of range (0 to " +
                 std::to_string(kMaxSeed) + ")");
  } else if (opts_.seed) {
    s.seed = *opts_.seed;
  }
  worlds(t.get("worlds"), w, s);
  roles(t.get("roles"), w, s);
  sizes(s);
  programs(s);
  hostsAllOrNone(s);
  traffic(t.get("traffic"), w, s);
  timeline(t.get("timeline"), w, s);
  nemesis(t.get("nemesis"), w, s);
  expect(t.get("expect"), w, s);
  return s;
}

void Validator::worlds(const LV* v, const std::string& w, Scenario& s) {
  if (v == nullptr || v->t != LV::T::kTable || v->fields.empty()) {
    error(w, "worlds: expected a table of worlds like { w1 = { backend = \"gloo\" } }");
    return;
  }
  for (const auto& [name, spec] : v->fields) {
    if (name.rfind("__", 0) == 0) continue;
    const std::string path = "worlds." + name;
    if (!mw::validWorldName(name)) {
      error(w, path + ": a world name is 1-128 characters of [A-Za-z0-9_.-]");
    }
    WorldSpec ws;
    ws.name = name;
    ws.where = w;
    if (spec.t != LV::T::kTable) {
      error(w, path + ": expected a table, got " + spec.show());
      continue;
    }
    onlyFields(spec, w, path, {"backend", "heartbeat", "op_timeout", "rejoin", "start", "size"});
    const std::string backend = str(spec.get("backend"), w, path + ".backend").value_or("gloo");
    if (auto b = mw::parseBackend(opts_.backend.value_or(backend)); b.ok()) {
      ws.backend = *b;
    }
    if (!mw::parseBackend(backend).ok()) {
      error(w, path + ".backend: expected \"gloo\" or \"nccl\", got \"" + backend + "\"");
    }
    // The runtime's own ranges (multiworld/world_manager.h), the op_timeout's cut to kMaxTime:
    // outside them, the run would fail only when the workers join, after their startup time.
    ws.heartbeat = duration(spec.get("heartbeat"), w, path + ".heartbeat", Ms(50), Ms(3600 * 1000))
                       .value_or(Ms(1000));
    ws.op_timeout = duration(spec.get("op_timeout"), w, path + ".op_timeout", Ms(1), kMaxTime)
                        .value_or(Ms(10000));
    ws.heartbeat_declared = spec.get("heartbeat") != nullptr;
    ws.op_timeout_declared = spec.get("op_timeout") != nullptr;
    ws.rejoin = boolean(spec.get("rejoin"), w, path + ".rejoin").value_or(false);
    ws.start = boolean(spec.get("start"), w, path + ".start").value_or(true);
    if (auto n = whole(spec.get("size"), w, path + ".size", 1, mw::kMaxWorldSize)) {
      ws.size = static_cast<int>(*n);
    }
    s.worlds[name] = ws;
  }
}

void Validator::roles(const LV* v, const std::string& w, Scenario& s) {
  if (v == nullptr || v->t != LV::T::kTable || v->fields.empty()) {
    error(w, "roles: expected a table of roles like { leader = { worlds = { w1 = 0 } } }");
    return;
  }
  for (const auto& [name, spec] : v->fields) {
    if (name.rfind("__", 0) == 0) continue;
    const std::string path = "roles." + name;
    if (!noNul(name, w, path)) continue;
    RoleSpec r;
    r.name = name;
    r.where = w;
    if (spec.t != LV::T::kTable) {
      error(w, path + ": expected a table, got " + spec.show());
      continue;
    }
    onlyFields(spec, w, path, {"worlds", "device", "host", "program", "env", "cwd", "stop_within"});
    program(spec, w, path, r);
    r.host = str(spec.get("host"), w, path + ".host").value_or("");
    if (!r.host.empty() && !mw::validWorldName(r.host)) {
      error(w, path + ".host: a host name is 1-128 characters of [A-Za-z0-9_.-]");
    }
    r.device = str(spec.get("device"), w, path + ".device").value_or("auto");
    if (r.device != "auto" && r.device != "cpu" && r.device != "gpu" &&
        r.device.rfind("cuda:", 0) != 0) {
      error(w, path + ".device: expected \"auto\", \"cpu\", \"gpu\" or \"cuda:N\", got \"" +
                   r.device + "\"");
    }
    const LV* ws = spec.get("worlds");
    if (ws == nullptr || ws->t != LV::T::kTable || ws->fields.empty()) {
      error(w, path +
                   ".worlds: expected the worlds this role joins with its rank, like "
                   "{ w1 = 0 }");
      continue;
    }
    for (const auto& [world, rank] : ws->fields) {
      const std::string rp = path + ".worlds." + world;
      if (!s.worlds.count(world)) {
        error(w, rp + ": no world '" + world + "' in worlds");
        continue;
      }
      if (rank.t != LV::T::kNum) {
        error(w, rp + ": expected a rank (a whole number >= 0), got " + rank.show());
        continue;
      }
      if (auto n = whole(&rank, w, rp, 0, mw::kMaxWorldSize - 1)) {
        r.ranks[world] = static_cast<int>(*n);
      }
    }
    s.roles[name] = r;
  }
}

void Validator::program(const LV& spec, const std::string& w, const std::string& path,
                        RoleSpec& r) {
  if (const LV* p = spec.get("program")) {
    if (p->t != LV::T::kTable || !p->fields.empty() || p->items.empty()) {
      error(w, path +
                   ".program: expected a command as a list of strings like "
                   "{ \"python3\", \"serve.py\" }, got " +
                   (p->t == LV::T::kTable && p->fields.empty() ? "an empty list" : p->show()));
    } else {
      for (size_t i = 0; i < p->items.size(); ++i) {
        const std::string ip = path + ".program[" + std::to_string(i + 1) + "]";
        if (auto a = str(&p->items[i], w, ip)) r.program.push_back(*a);
      }
      if (r.program.size() == p->items.size() && r.program[0].empty()) {
        error(w, path + ".program[1]: the program to run is empty");
      }
      if (r.program.size() != p->items.size()) r.program.clear();
    }
  }
  const LV* env = spec.get("env");
  const LV* cwd = spec.get("cwd");
  const LV* stop_within = spec.get("stop_within");
  if ((env != nullptr || cwd != nullptr || stop_within != nullptr) &&
      spec.get("program") == nullptr) {
    error(w, path +
                 (env != nullptr   ? ".env"
                  : cwd != nullptr ? ".cwd"
                                   : ".stop_within") +
                 ": only a program role (program = { ... }) takes env, cwd and stop_within");
  }
  r.stop_within = duration(stop_within, w, path + ".stop_within", Ms(100), Ms(600 * 1000))
                      .value_or(RoleSpec::kDefaultStopWithin);
  if (env != nullptr) {
    if (env->t != LV::T::kTable || !env->items.empty()) {
      error(w, path + ".env: expected variables like { NAME = \"value\" }, got " + env->show());
    } else {
      for (const auto& [name, value] : env->fields) {
        const std::string ep = path + ".env." + name;
        const bool ok_name = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                             std::all_of(name.begin(), name.end(), [](char c) {
                               return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                             });
        if (!ok_name) error(w, ep + ": a variable name is letters, digits and '_'");
        if (std::find(std::begin(kHarnessVariables), std::end(kHarnessVariables), name) !=
            std::end(kHarnessVariables)) {
          error(w, ep + ": the harness sets " + name + " itself");
        }
        if (auto v = str(&value, w, ep)) r.env[name] = *v;
      }
    }
  }
  r.cwd = str(cwd, w, path + ".cwd").value_or("");
}

void Validator::programs(Scenario& s) {
  char real[PATH_MAX];
  const size_t slash = file_.rfind('/');
  std::string dir = slash == std::string::npos ? "." : file_.substr(0, slash);
  if (::realpath(dir.c_str(), real) != nullptr) dir = real;
  // `p` against `base` (without its "./"). Not resolved: a symbolic link (a virtual
  // environment's python3) must be executed by its own name.
  auto absolute = [](const std::string& base, std::string p) {
    while (p.rfind("./", 0) == 0) p.erase(0, 2);
    return p.front() == '/' ? p : base + "/" + p;
  };
  for (auto& [name, r] : s.roles) {
    if (!r.isProgram()) continue;
    const std::string path = "roles." + name;
    r.cwd = r.cwd.empty() ? dir : absolute(dir, r.cwd);
    if (::realpath(r.cwd.c_str(), real) != nullptr) r.cwd = real;
    struct stat st {};
    if (::stat(r.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      error(r.where, path + ".cwd: '" + r.cwd + "' is not a directory");
    }
    const std::string& exe = r.program[0];
    std::string why;
    if (exe.find("${") != std::string::npos) {
      error(r.where, path + ".program[1]: the program to run cannot hold placeholders");
    } else if (exe.find('/') == std::string::npos) {
      r.executable = chaos::onPath(exe);
      if (r.executable.empty()) why = "'" + exe + "' is not an executable file in PATH";
    } else {
      const std::string full = absolute(r.cwd, exe);
      if (::stat(full.c_str(), &st) != 0) {
        why = "'" + full + "' does not exist";
      } else if (!S_ISREG(st.st_mode) || ::access(full.c_str(), X_OK) != 0) {
        why = "'" + full + "' is not an executable file";
      } else {
        r.executable = full;
      }
    }
    if (!why.empty()) error(r.where, path + ".program[1]: " + why);
    const std::map<std::string, StoreAddress> none;
    for (size_t i = 1; i < r.program.size(); ++i) {
      std::string err;
      if (!expandPlaceholders(r.program[i], s, r, none, "", &err)) {
        error(r.where, path + ".program[" + std::to_string(i + 1) + "]: " + err);
      }
    }
    for (const auto& [var, value] : r.env) {
      std::string err;
      if (!expandPlaceholders(value, s, r, none, "", &err)) {
        error(r.where, path + ".env." + var + ": " + err);
      }
    }
  }
}

void Validator::sizes(Scenario& s) {
  for (auto& [name, ws] : s.worlds) {
    std::map<int, std::vector<std::string>> byRank;
    for (const auto& [role, r] : s.roles) {
      auto it = r.ranks.find(name);
      if (it != r.ranks.end()) byRank[it->second].push_back(role);
    }
    if (byRank.empty()) {
      error(ws.where, "worlds." + name + ": world has no members (no role lists it)");
      continue;
    }
    for (const auto& [rank, roles] : byRank) {
      if (roles.size() > 1) {
        error(ws.where, "worlds." + name + ": rank " + std::to_string(rank) +
                            " is taken by more than one role (" + roles[0] + " and " + roles[1] +
                            ")");
      }
    }
    int n = static_cast<int>(byRank.size());
    if (byRank.rbegin()->first != n - 1) {
      error(ws.where, "worlds." + name + ": ranks must be 0.." + std::to_string(n - 1) +
                          " (one role each), found rank " + std::to_string(byRank.rbegin()->first));
    }
    if (ws.size != 0 && ws.size != n) {
      error(ws.where, "worlds." + name + ".size: " + std::to_string(ws.size) + " but " +
                          std::to_string(n) + " roles are members");
    }
    ws.size = n;
  }
}

void Validator::hostsAllOrNone(const Scenario& s) {
  std::string with, without;
  for (const auto& [name, r] : s.roles) (r.host.empty() ? without : with) = name;
  if (!with.empty() && !without.empty()) {
    error(s.roles.at(without).where, "roles." + without + ".host: role '" + with +
                                         "' is placed on a host, so every role needs one");
  }
}

void Validator::traffic(const LV* v, const std::string& w, Scenario& s) {
  if (v == nullptr) return;
  if (v->t != LV::T::kTable || !v->fields.empty()) {
    error(w, "traffic: expected a list like { gather_to_leader { worlds = { \"w1\" } } }");
    return;
  }
  for (size_t i = 0; i < v->items.size(); ++i) {
    const LV& t = v->items[i];
    const std::string path = "traffic[" + std::to_string(i + 1) + "]";
    const std::string tw = t.whereTag(w);
    TrafficSpec ts;
    ts.where = tw;
    const auto pattern = chaos::parseTrafficPattern(t.kindTag());
    if (t.t != LV::T::kTable || !pattern) {
      error(tw, path +
                    ": expected gather_to_leader{...}, ring_allreduce{...}, broadcast{...} "
                    "or pipeline{...}");
      continue;
    }
    ts.pattern = *pattern;
    onlyFields(t, tw, path, {"world", "worlds", "bytes", "dtype", "rate", "root"});
    ts.worlds = strList(t.get("worlds"), tw, path + ".worlds");
    if (auto one = str(t.get("world"), tw, path + ".world")) ts.worlds.push_back(*one);
    if (ts.worlds.empty()) error(tw, path + ": name its world (world = \"w1\") or worlds");
    for (const auto& wn : ts.worlds) {
      if (!s.worlds.count(wn)) error(tw, path + ": no world '" + wn + "' in worlds");
      for (const auto& member : s.membersOf(wn)) {
        if (s.roles.at(member).isProgram()) {
          error(tw, path + ": world '" + wn + "' has program role '" + member +
                        "' as a member; the traffic patterns run in mw_worker on every member");
        }
      }
    }
    if (const LV* b = t.get("bytes")) {
      std::optional<uint64_t> n;
      if (b->t == LV::T::kStr) n = parseBytes(b->s);
      // Compared before the cast: a double past uint64_t's range does not convert.
      if (b->t == LV::T::kNum && b->n >= 1 && b->n <= (1ULL << 31)) {
        n = static_cast<uint64_t>(b->n);
      }
      if (!n || *n == 0 || *n > (1ULL << 31)) {
        error(tw,
              path + ".bytes: expected a size from 1 byte to 2GiB like \"1MiB\", got " + b->show());
      } else {
        ts.bytes = *n;
      }
    }
    const std::string dtype = str(t.get("dtype"), tw, path + ".dtype").value_or("float32");
    if (auto d = mw::parseDType(dtype); d.ok()) {
      ts.dtype = *d;
    } else {
      error(tw, path + ".dtype: unknown dtype \"" + dtype + "\"");
    }
    ts.rate =
        number(t.get("rate"), tw, path + ".rate", 0, kMaxRate, "operations per second").value_or(0);
    if (ts.rate > 0 && ts.rate < kMinRate) {
      error(tw, path + ".rate: " + numberText(ts.rate) + " is below " + numberText(kMinRate) +
                    " operations per second (give 0 for as fast as possible)");
    }
    ts.root = static_cast<int>(
        whole(t.get("root"), tw, path + ".root", 0, mw::kMaxWorldSize - 1).value_or(0));
    for (const auto& wn : ts.worlds) {
      auto it = s.worlds.find(wn);
      if (it != s.worlds.end() && ts.root >= it->second.size) {
        error(tw, path + ".root: rank " + std::to_string(ts.root) + " is not a member of world '" +
                      wn + "' (ranks 0 to " + std::to_string(it->second.size - 1) + ")");
      }
    }
    if (ts.pattern == chaos::TrafficPattern::kPipeline) {
      for (const auto& wn : ts.worlds) {
        auto it = s.worlds.find(wn);
        if (it != s.worlds.end() && it->second.size != 2) {
          error(tw, path + ": pipeline world '" + wn +
                        "' must have 2 members (stage i as rank 0, "
                        "stage i+1 as rank 1)");
        }
      }
    }
    // One pattern per world: the worker runs each pattern on a thread of its own, and two
    // patterns' operations would interleave in a different order at each member (a collective
    // meeting another kind breaks the world; a gather facing an all_reduce stalls).
    for (const auto& wn : ts.worlds) {
      for (const auto& other : s.traffic) {
        if (std::find(other.worlds.begin(), other.worlds.end(), wn) == other.worlds.end()) {
          continue;
        }
        error(tw, path + ": world '" + wn + "' already carries " +
                      chaos::trafficPatternName(other.pattern) + " (" + other.where +
                      "); a world carries one traffic pattern");
      }
    }
    if (std::set<std::string>(ts.worlds.begin(), ts.worlds.end()).size() != ts.worlds.size()) {
      error(tw, path + ".worlds: a world is named twice");
    }
    s.traffic.push_back(ts);
  }
}

}  // namespace mw::harness::loader
