// Loading scenario files: Lua 5.4 runs the file in a sandbox; the table given to scenario{} is
// converted to a generic value tree, then validated into the Scenario model with messages that
// name the file, line and field.
#include "harness/scenario.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <lua.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chaos/posix_faults.h"
#include "harness/lua_sandbox.h"
#include "harness/nemesis.h"

namespace mw::harness {

namespace {

// Constructors that tag each table with its kind and the file:line it was written at. Called with
// the file's path and the seed; returns the list that scenario { ... } appends to.
constexpr const char* kPrelude = R"lua(
local file, seed = ...
local getinfo = debug.getinfo
local function where()
  local i = getinfo(3, "Sl")
  if not i then return "?" end
  local src = i.source == "=scenario" and file or i.source:sub(1, 1) == "@" and i.source:sub(2)
              or i.short_src
  return src .. ":" .. (i.currentline or 0)
end
local function tagged(kind, t, w)
  if type(t) ~= "table" then error(kind .. " takes a table: " .. kind .. " { ... }", 3) end
  t.__kind = kind
  t.__where = w
  return t
end
local scenarios = {}
function scenario(t)
  scenarios[#scenarios + 1] = tagged("scenario", t, where())
end
function at(time, action)
  return { __kind = "at", time = time, action = action, __where = where() }
end
function kill(role, signal)
  return { __kind = "kill", role = role, signal = signal or "SIGKILL", __where = where() }
end
function pause(role) return { __kind = "pause", role = role, __where = where() } end
function resume(role) return { __kind = "resume", role = role, __where = where() } end
function restart(role) return { __kind = "restart", role = role, __where = where() } end
function failpoint(role, point, mode)
  return { __kind = "failpoint", role = role, point = point, mode = mode or {}, __where = where() }
end
function clear_failpoint(role, point)
  return { __kind = "clear_failpoint", role = role, point = point, __where = where() }
end
function remove_world(role, world)
  return { __kind = "remove_world", role = role, world = world, __where = where() }
end
function add_world(role, world)
  return { __kind = "add_world", role = role, world = world, __where = where() }
end
function partition(t) return tagged("partition", t, where()) end
function heal() return { __kind = "heal", __where = where() } end
function loss(host, p) return { __kind = "loss", host = host, p = p, __where = where() } end
function bandwidth(host, rate)
  return { __kind = "bandwidth", host = host, rate = rate, __where = where() }
end
function delay(host, d, jitter)
  return { __kind = "delay", host = host, delay = d, jitter = jitter, __where = where() }
end
function gather_to_leader(t) return tagged("gather_to_leader", t, where()) end
function ring_allreduce(t) return tagged("ring_allreduce", t, where()) end
function broadcast(t) return tagged("broadcast", t, where()) end
function pipeline(t) return tagged("pipeline", t, where()) end
function throughput_kept(t) return tagged("throughput_kept", t, where()) end
-- star { workers = { "a", "b" } or N, leader = "leader", prefix = "w", hosts = false,
--        world = { heartbeat = "500ms", ... }, each = { w2 = { rejoin = true } } }
-- The MultiWorld shape: one leader, and one world of two members per worker (the leader rank 0,
-- the worker rank 1), named prefix..i. Returns the worlds and roles tables for scenario { ... }.
function star(t)
  if type(t) ~= "table" then error("star takes a table: star { workers = { \"a\", \"b\" } }", 2) end
  local workers = t.workers
  if type(workers) == "number" then
    if workers < 1 or workers > 1024 or workers % 1 ~= 0 then
      error("star: workers = N takes a whole number from 1 to 1024", 2)
    end
    local names = {}
    for i = 1, workers do names[i] = "worker" .. i end
    workers = names
  end
  if type(workers) ~= "table" or #workers == 0 then
    error("star: workers must be a list of role names or a count", 2)
  end
  local leader, prefix = t.leader or "leader", t.prefix or "w"
  if type(leader) ~= "string" or type(prefix) ~= "string" then
    error("star: leader and prefix must be strings", 2)
  end
  for k in pairs(t) do
    if k ~= "workers" and k ~= "leader" and k ~= "prefix" and k ~= "hosts" and k ~= "world" and
       k ~= "each" then
      error("star: unknown field '" .. tostring(k) .. "'", 2)
    end
  end
  local worlds, roles = {}, { [leader] = { worlds = {} } }
  if t.hosts then roles[leader].host = "h0" end
  for i, worker in ipairs(workers) do
    if type(worker) ~= "string" then error("star: workers[" .. i .. "] must be a role name", 2) end
    local w = prefix .. i
    local opts = {}
    for k, v in pairs(t.world or {}) do opts[k] = v end
    for k, v in pairs((t.each or {})[w] or {}) do opts[k] = v end
    worlds[w] = opts
    roles[leader].worlds[w] = 0
    roles[worker] = { worlds = { [w] = 1 } }
    if t.hosts then roles[worker].host = "h" .. i end
  end
  return worlds, roles
end
-- Scripts that draw random numbers draw the same ones for the same seed.
math.randomseed(seed)
return scenarios
)lua";

struct LVField;

// A Lua value, converted.
struct LV {
  enum class T { kNil, kBool, kNum, kStr, kTable, kFunc } t = T::kNil;
  bool b = false;
  double n = 0;
  std::string s;
  // String keys, sorted. (A pair<string, LV> member would need LV complete, which only GCC's
  // library lets pass; LVField is that pair.)
  std::vector<LVField> fields;
  std::vector<LV> items;  // 1..n
  int func_ref = LUA_NOREF;

  const LV* get(const std::string& k) const;
  std::string kindTag() const {
    const LV* k = get("__kind");
    return k && k->t == T::kStr ? k->s : "";
  }
  std::string whereTag(const std::string& fallback) const {
    const LV* w = get("__where");
    return w && w->t == T::kStr ? w->s : fallback;
  }
  std::string typeName() const {
    switch (t) {
      case T::kNil:
        return "nil";
      case T::kBool:
        return "a boolean";
      case T::kNum:
        return "a number";
      case T::kStr:
        return "a string";
      case T::kTable:
        return "a table";
      case T::kFunc:
        return "a function";
    }
    return "?";
  }
  std::string show() const {
    switch (t) {
      case T::kStr:
        return "\"" + s + "\"";
      case T::kNum: {
        std::ostringstream o;
        o << n;
        return o.str();
      }
      case T::kBool:
        return b ? "true" : "false";
      default:
        return typeName();
    }
  }
};

struct LVField {
  std::string first;
  LV second;
};

const LV* LV::get(const std::string& k) const {
  for (const auto& [key, v] : fields) {
    if (key == k) return &v;
  }
  return nullptr;
}

// Converts the value at `idx`. Errors (non-string keys, cycles, depth) go to `err`. `open`: the
// tables being converted on the way here (a table met again among them contains itself).
LV convert(lua_State* L, int idx, int depth, std::string* err, std::vector<const void*>* open) {
  LV v;
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return v;
    case LUA_TBOOLEAN:
      v.t = LV::T::kBool;
      v.b = lua_toboolean(L, idx) != 0;
      return v;
    case LUA_TNUMBER:
      v.t = LV::T::kNum;
      v.n = lua_tonumber(L, idx);
      return v;
    case LUA_TSTRING:
      v.t = LV::T::kStr;
      v.s = lua_tostring(L, idx);
      return v;
    case LUA_TFUNCTION:
      v.t = LV::T::kFunc;
      lua_pushvalue(L, idx);
      v.func_ref = luaL_ref(L, LUA_REGISTRYINDEX);
      return v;
    case LUA_TTABLE:
      break;
    default:
      if (err->empty()) *err = std::string("unsupported value of type ") + luaL_typename(L, idx);
      return v;
  }
  v.t = LV::T::kTable;
  const void* self = lua_topointer(L, idx);
  if (std::find(open->begin(), open->end(), self) != open->end()) {
    if (err->empty()) *err = "a table contains itself (a cycle): scenario tables must be trees";
    return v;
  }
  // Each level holds a key and a value on the Lua stack: without room, Lua writes past its end.
  if (depth > 32 || !lua_checkstack(L, 4)) {
    if (err->empty()) *err = "tables nested more than 32 deep";
    return v;
  }
  open->push_back(self);
  lua_Integer len = static_cast<lua_Integer>(lua_rawlen(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      std::string key = lua_tostring(L, -2);
      v.fields.push_back(LVField{key, convert(L, -1, depth + 1, err, open)});
    } else if (lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 && lua_tointeger(L, -2) <= len) {
      // sequence part: collected in order below
    } else if (err->empty()) {
      *err = "a table key must be a string or a position 1..n";
    }
    lua_pop(L, 1);
  }
  for (lua_Integer i = 1; i <= len; ++i) {
    lua_rawgeti(L, idx, i);
    v.items.push_back(convert(L, -1, depth + 1, err, open));
    lua_pop(L, 1);
  }
  open->pop_back();
  std::sort(v.fields.begin(), v.fields.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return v;
}

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

struct ErrnoName {
  const char* name;
  int number;
};
constexpr ErrnoName kErrnos[] = {
    {"ECONNRESET", ECONNRESET},
    {"EPIPE", EPIPE},
    {"EIO", EIO},
    {"ETIMEDOUT", ETIMEDOUT},
    {"ECONNREFUSED", ECONNREFUSED},
    {"ENETUNREACH", ENETUNREACH},
    {"EHOSTUNREACH", EHOSTUNREACH},
    {"ENOMEM", ENOMEM},
    {"EAGAIN", EAGAIN},
    {"EINVAL", EINVAL},
    {"ENOSPC", ENOSPC},
    {"ECONNABORTED", ECONNABORTED},
};

struct NcclName {
  const char* name;
  int number;
  int gloo_errno;  // what a Gloo world gets instead when the scenario runs on Gloo
};
constexpr NcclName kNcclResults[] = {
    {"ncclUnhandledCudaError", 1, EIO}, {"ncclSystemError", 2, EIO},
    {"ncclInternalError", 3, EIO},      {"ncclInvalidArgument", 4, EINVAL},
    {"ncclInvalidUsage", 5, EINVAL},    {"ncclRemoteError", 6, ECONNRESET},
};

class Validator {
 public:
  Validator(std::string file, const LoadOptions& opts) : file_(std::move(file)), opts_(opts) {}

  // Records "where: msg". Lua tables keep no line numbers, so for a field of a table, `where` (the
  // line its constructor was called at) is refined to the first line from there on that names the
  // field: "worlds.w1.heartbeet: ..." points at the line holding "heartbeet =".
  void error(const std::string& where, const std::string& msg) {
    errors.push_back(refine(where, msg) + ": " + msg);
  }

  std::string refine(const std::string& where, const std::string& msg) {
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

  // Reports every field of `t` not in `allowed` (tags excepted).
  void onlyFields(const LV& t, const std::string& where, const std::string& path,
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

  std::optional<Ms> duration(const LV* v, const std::string& where, const std::string& path) {
    if (v == nullptr) return std::nullopt;
    std::optional<Ms> d;
    if (v->t == LV::T::kStr) d = parseDuration(v->s);
    if (v->t == LV::T::kNum && v->n >= 0) d = Ms(static_cast<long long>(std::llround(v->n * 1000)));
    if (!d) error(where, path + ": expected a duration like \"500ms\" or \"2s\", got " + v->show());
    return d;
  }

  // The value of `v` when it has type `t` (nullopt, and an error naming `expected`, otherwise).
  template <typename R>
  std::optional<R> typed(const LV* v, LV::T t, R (*get)(const LV&), const char* expected,
                         const std::string& where, const std::string& path) {
    if (v == nullptr) return std::nullopt;
    if (v->t != t) {
      error(where, path + ": expected " + expected + ", got " + v->show());
      return std::nullopt;
    }
    return get(*v);
  }
  std::optional<std::string> str(const LV* v, const std::string& where, const std::string& path) {
    return typed<std::string>(
        v, LV::T::kStr, [](const LV& x) { return x.s; }, "a string", where, path);
  }
  std::optional<double> num(const LV* v, const std::string& where, const std::string& path) {
    return typed<double>(
        v, LV::T::kNum, [](const LV& x) { return x.n; }, "a number", where, path);
  }
  std::optional<bool> boolean(const LV* v, const std::string& where, const std::string& path) {
    return typed<bool>(
        v, LV::T::kBool, [](const LV& x) { return x.b; }, "true or false", where, path);
  }

  std::vector<std::string> strList(const LV* v, const std::string& where, const std::string& path) {
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

  Scenario scenario(const LV& t) {
    Scenario s;
    s.file = file_;
    const std::string w = t.whereTag(file_ + ":1");
    s.where = w;
    onlyFields(t, w, "",
               {"name", "description", "duration", "warmup", "seed", "worlds", "roles", "traffic",
                "timeline", "nemesis", "expect"});
    s.name = str(t.get("name"), w, "name").value_or("");
    if (s.name.empty()) error(w, "name: every scenario needs a name");
    s.description = str(t.get("description"), w, "description").value_or("");
    s.duration = duration(t.get("duration"), w, "duration").value_or(Ms(5000));
    s.warmup = duration(t.get("warmup"), w, "warmup")
                   .value_or(Ms(std::min<long long>(1000, s.duration.count() / 4)));
    if (s.duration < Ms(500) || s.duration > Ms(24LL * 3600 * 1000)) {
      error(w, "duration: must be between 500ms and 24h");
    }
    if (opts_.duration) s.duration = *opts_.duration;
    if (s.warmup >= s.duration) error(w, "warmup: must be shorter than the duration");
    if (auto seed = num(t.get("seed"), w, "seed")) {
      if (*seed < 0 || *seed != std::floor(*seed)) error(w, "seed: expected a whole number >= 0");
      s.seed = static_cast<uint64_t>(*seed);
    }
    if (opts_.seed) s.seed = *opts_.seed;
    worlds(t.get("worlds"), w, s);
    roles(t.get("roles"), w, s);
    sizes(s);
    hostsAllOrNone(s);
    traffic(t.get("traffic"), w, s);
    timeline(t.get("timeline"), w, s);
    nemesis(t.get("nemesis"), w, s);
    expect(t.get("expect"), w, s);
    return s;
  }

  void worlds(const LV* v, const std::string& w, Scenario& s) {
    if (v == nullptr || v->t != LV::T::kTable || v->fields.empty()) {
      error(w, "worlds: expected a table of worlds like { w1 = { backend = \"gloo\" } }");
      return;
    }
    for (const auto& [name, spec] : v->fields) {
      if (name.rfind("__", 0) == 0) continue;
      const std::string path = "worlds." + name;
      if (!validWorldName(name)) {
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
      ws.backend = str(spec.get("backend"), w, path + ".backend").value_or("gloo");
      if (ws.backend != "gloo" && ws.backend != "nccl") {
        error(w, path + ".backend: expected \"gloo\" or \"nccl\", got \"" + ws.backend + "\"");
      }
      if (opts_.backend) ws.backend = *opts_.backend;
      ws.heartbeat = duration(spec.get("heartbeat"), w, path + ".heartbeat").value_or(Ms(1000));
      if (ws.heartbeat < Ms(50)) error(w, path + ".heartbeat: must be at least 50ms");
      ws.op_timeout = duration(spec.get("op_timeout"), w, path + ".op_timeout").value_or(Ms(10000));
      ws.rejoin = boolean(spec.get("rejoin"), w, path + ".rejoin").value_or(false);
      ws.start = boolean(spec.get("start"), w, path + ".start").value_or(true);
      if (auto n = num(spec.get("size"), w, path + ".size")) ws.size = static_cast<int>(*n);
      s.worlds[name] = ws;
    }
  }

  static bool validWorldName(const std::string& n) {
    if (n.empty() || n.size() > 128) return false;
    return std::all_of(n.begin(), n.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
    });
  }

  void roles(const LV* v, const std::string& w, Scenario& s) {
    if (v == nullptr || v->t != LV::T::kTable || v->fields.empty()) {
      error(w, "roles: expected a table of roles like { leader = { worlds = { w1 = 0 } } }");
      return;
    }
    for (const auto& [name, spec] : v->fields) {
      if (name.rfind("__", 0) == 0) continue;
      const std::string path = "roles." + name;
      RoleSpec r;
      r.name = name;
      r.where = w;
      if (spec.t != LV::T::kTable) {
        error(w, path + ": expected a table, got " + spec.show());
        continue;
      }
      onlyFields(spec, w, path, {"worlds", "device", "host"});
      r.host = str(spec.get("host"), w, path + ".host").value_or("");
      if (!r.host.empty() && !validWorldName(r.host)) {
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
        if (rank.t != LV::T::kNum || rank.n < 0 || rank.n != std::floor(rank.n)) {
          error(w, rp + ": expected a rank (a whole number >= 0), got " + rank.show());
          continue;
        }
        r.ranks[world] = static_cast<int>(rank.n);
      }
      s.roles[name] = r;
    }
  }

  // Each world's members: ranks 0..n-1, each exactly once.
  void sizes(Scenario& s) {
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
                            " (one role each), found rank " +
                            std::to_string(byRank.rbegin()->first));
      }
      if (ws.size != 0 && ws.size != n) {
        error(ws.where, "worlds." + name + ".size: " + std::to_string(ws.size) + " but " +
                            std::to_string(n) + " roles are members");
      }
      ws.size = n;
    }
  }

  // Simulated hosts are all or nothing: a role on loopback cannot reach one in a namespace.
  void hostsAllOrNone(const Scenario& s) {
    std::string with, without;
    for (const auto& [name, r] : s.roles) (r.host.empty() ? without : with) = name;
    if (!with.empty() && !without.empty()) {
      error(s.roles.at(without).where, "roles." + without + ".host: role '" + with +
                                           "' is placed on a host, so every role needs one");
    }
  }

  void traffic(const LV* v, const std::string& w, Scenario& s) {
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
      ts.pattern = t.kindTag();
      ts.where = tw;
      static const std::set<std::string> patterns = {"gather_to_leader", "ring_allreduce",
                                                     "broadcast", "pipeline"};
      if (t.t != LV::T::kTable || !patterns.count(ts.pattern)) {
        error(tw, path +
                      ": expected gather_to_leader{...}, ring_allreduce{...}, broadcast{...} "
                      "or pipeline{...}");
        continue;
      }
      onlyFields(t, tw, path, {"world", "worlds", "bytes", "dtype", "rate", "root"});
      ts.worlds = strList(t.get("worlds"), tw, path + ".worlds");
      if (auto one = str(t.get("world"), tw, path + ".world")) ts.worlds.push_back(*one);
      if (ts.worlds.empty()) error(tw, path + ": name its world (world = \"w1\") or worlds");
      for (const auto& wn : ts.worlds) {
        if (!s.worlds.count(wn)) error(tw, path + ": no world '" + wn + "' in worlds");
      }
      if (const LV* b = t.get("bytes")) {
        std::optional<uint64_t> n;
        if (b->t == LV::T::kStr) n = parseBytes(b->s);
        if (b->t == LV::T::kNum && b->n >= 1) n = static_cast<uint64_t>(b->n);
        if (!n || *n == 0 || *n > (1ULL << 31)) {
          error(tw, path + ".bytes: expected a size from 1 byte to 2GiB like \"1MiB\", got " +
                        b->show());
        } else {
          ts.bytes = *n;
        }
      }
      ts.dtype = str(t.get("dtype"), tw, path + ".dtype").value_or("float32");
      static const std::set<std::string> dtypes = {"float32", "float64",  "int32", "int64",
                                                   "float16", "bfloat16", "uint8"};
      if (!dtypes.count(ts.dtype)) error(tw, path + ".dtype: unknown dtype \"" + ts.dtype + "\"");
      ts.rate = num(t.get("rate"), tw, path + ".rate").value_or(0);
      if (ts.rate < 0) error(tw, path + ".rate: must be >= 0 (0: as fast as possible)");
      ts.root = static_cast<int>(num(t.get("root"), tw, path + ".root").value_or(0));
      if (ts.pattern == "pipeline") {
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
          error(tw, path + ": world '" + wn + "' already carries " + other.pattern + " (" +
                        other.where + "); a world carries one traffic pattern");
        }
      }
      if (std::set<std::string>(ts.worlds.begin(), ts.worlds.end()).size() != ts.worlds.size()) {
        error(tw, path + ".worlds: a world is named twice");
      }
      s.traffic.push_back(ts);
    }
  }

  void timeline(const LV* v, const std::string& w, Scenario& s) {
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
      auto t = duration(a.get("time"), aw, path + " time");
      const LV* act = a.get("action");
      if (act == nullptr || act->t != LV::T::kTable || act->kindTag().empty() ||
          act->kindTag() == "at") {
        error(aw, path + ": at(time, action) needs an action such as kill(\"b\")");
        continue;
      }
      ActionSpec as;
      as.at = t.value_or(Ms(0));
      as.kind = act->kindTag();
      as.where = act->whereTag(aw);
      if (t && *t > s.duration) {
        error(aw, path + ": at " + std::to_string(t->count()) +
                      " ms is past the end of the scenario (duration " +
                      std::to_string(s.duration.count()) + " ms)");
      }
      if (as.network()) {
        network(*act, aw, path, s, as);
        s.timeline.push_back(as);
        continue;
      }
      as.role = str(act->get("role"), aw, path + " role").value_or("");
      if (!s.roles.count(as.role)) {
        error(aw, path + ": " + as.kind + ": no role '" + as.role + "' in roles");
      }
      if (as.kind == "kill") {
        std::string sig = "SIGKILL";
        if (const LV* v = act->get("signal")) {
          if (v->t == LV::T::kNum) {
            sig = std::to_string(static_cast<long>(v->n));
          } else {
            sig = str(v, aw, path + " signal").value_or("SIGKILL");
          }
        }
        as.signal = signalNumber(sig, &as.signal_name);
        if (as.signal == 0) error(aw, path + ": kill: unknown signal \"" + sig + "\"");
      } else if (as.kind == "failpoint" || as.kind == "clear_failpoint") {
        as.point = str(act->get("point"), aw, path + " point").value_or("");
        if (as.point.empty()) error(aw, path + ": " + as.kind + " needs a point name");
        if (chaos::isPosixPoint(as.point)) {
          if (auto why = chaos::checkPosixPoint(as.point); !why.empty()) {
            error(aw, path + ": " + why);
          } else if (as.kind == "failpoint") {
            posixMode(act->get("mode"), aw, path, as);
          }
        } else {
          if (as.kind == "failpoint") failMode(act->get("mode"), aw, path, s, as);
          expandBackend(s, as);
        }
      } else if (as.kind == "remove_world" || as.kind == "add_world") {
        as.world = str(act->get("world"), aw, path + " world").value_or("");
        auto r = s.roles.find(as.role);
        if (r != s.roles.end() && !r->second.ranks.count(as.world)) {
          error(aw, path + ": " + as.kind + ": role '" + as.role + "' is not a member of world '" +
                        as.world + "'");
        }
      } else if (as.kind != "pause" && as.kind != "resume" && as.kind != "restart") {
        error(aw, path + ": unknown action " + as.kind);
      }
      s.timeline.push_back(as);
    }
    std::stable_sort(s.timeline.begin(), s.timeline.end(),
                     [](const ActionSpec& a, const ActionSpec& b) { return a.at < b.at; });
  }

  void network(const LV& act, const std::string& aw, const std::string& path, const Scenario& s,
               ActionSpec& as) {
    std::set<std::string> hosts;
    for (const auto& h : s.hosts()) hosts.insert(h);
    if (hosts.empty()) {
      error(aw, path + ": " + as.kind +
                    " needs simulated hosts: give each role a host, like "
                    "roles = { a = { host = \"h1\", ... } }");
      return;
    }
    auto knownHost = [&](const std::string& h, const std::string& p) {
      if (!hosts.count(h))
        error(aw, path + ": " + as.kind + ": no role is on host '" + h + "' (" + p + ")");
    };
    if (as.kind == "partition") {
      onlyFields(act, aw, path + " partition", {"a", "b", "mode", "oneway"});
      as.hosts_a = strList(act.get("a"), aw, path + " partition.a");
      as.hosts_b = strList(act.get("b"), aw, path + " partition.b");
      if (as.hosts_a.empty() || as.hosts_b.empty()) {
        error(aw, path + ": partition { a = { hosts }, b = { hosts } } needs both sides");
      }
      for (const auto& h : as.hosts_a) knownHost(h, "partition.a");
      for (const auto& h : as.hosts_b) knownHost(h, "partition.b");
      std::string mode = str(act.get("mode"), aw, path + " partition.mode").value_or("silent");
      if (mode != "silent" && mode != "loud") {
        error(aw, path +
                      ": partition.mode: expected \"silent\" (drop) or \"loud\" (reset), got \"" +
                      mode + "\"");
      }
      as.loud = mode == "loud";
      as.oneway = boolean(act.get("oneway"), aw, path + " partition.oneway").value_or(false);
      return;
    }
    if (as.kind == "heal") return;
    as.host = str(act.get("host"), aw, path + " host").value_or("");
    knownHost(as.host, "host");
    if (as.kind == "loss") {
      auto p = num(act.get("p"), aw, path + " loss probability");
      if (!p || !(*p > 0 && *p < 1)) {
        error(aw, path + ": loss(host, p): p must be a probability in (0, 1), like 0.2");
      }
      as.loss = p.value_or(0);
    } else if (as.kind == "bandwidth") {
      as.rate = str(act.get("rate"), aw, path + " bandwidth rate").value_or("");
      bool ok = !as.rate.empty() && std::isdigit(static_cast<unsigned char>(as.rate[0]));
      if (!ok) error(aw, path + ": bandwidth(host, rate): rate like \"10mbit\" or \"1gbit\"");
    } else if (as.kind == "delay") {
      as.delay_ms =
          static_cast<int>(duration(act.get("delay"), aw, path + " delay").value_or(Ms(0)).count());
      as.jitter_ms = static_cast<int>(
          duration(act.get("jitter"), aw, path + " jitter").value_or(Ms(0)).count());
      if (as.delay_ms <= 0) error(aw, path + ": delay(host, d [, jitter]): d like \"50ms\"");
    }
  }

  // A seeded random schedule of faults (the "nemesis", harness/nemesis.h), validated and drawn
  // here so that the planned timeline is known before the run.
  void nemesis(const LV* v, const std::string& w, Scenario& s) {
    if (v == nullptr) return;
    if (v->t != LV::T::kTable) {
      error(
          w,
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
    n.start = duration(v->get("start"), w, "nemesis.start").value_or(s.warmup);
    n.stop = duration(v->get("stop"), w, "nemesis.stop").value_or(s.duration - Ms(1000));
    n.gap = duration(v->get("gap"), w, "nemesis.gap").value_or(Ms(1000));
    n.hold = duration(v->get("hold"), w, "nemesis.hold").value_or(Ms(300));
    n.loss = num(v->get("loss"), w, "nemesis.loss").value_or(0.1);
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
    if (n.gap < Ms(50) || n.hold < Ms(10))
      error(w, "nemesis: gap must be >= 50ms and hold >= 10ms");
    if (!errors.empty()) return;
    for (auto& a : drawNemesis(n, s.seed, s.hosts(), w)) s.timeline.push_back(std::move(a));
    std::stable_sort(s.timeline.begin(), s.timeline.end(),
                     [](const ActionSpec& a, const ActionSpec& b) { return a.at < b.at; });
  }

  // "{backend}" in a point name becomes the backend of the world the point names (or of the
  // role's first world); an NCCL error asked of a Gloo world becomes its Gloo equivalent.
  void expandBackend(const Scenario& s, ActionSpec& as) {
    std::string world = as.point.substr(as.point.rfind('/') + 1);
    auto it = s.worlds.find(world);
    if (it == s.worlds.end()) {
      auto r = s.roles.find(as.role);
      if (r != s.roles.end() && !r->second.ranks.empty())
        it = s.worlds.find(r->second.ranks.begin()->first);
    }
    const std::string backend = it != s.worlds.end() ? it->second.backend : "gloo";
    for (size_t p; (p = as.point.find("{backend}")) != std::string::npos;) {
      as.point.replace(p, 9, backend);
    }
    // A point written for NCCL (mw/nccl/...) on a world that runs on Gloo.
    if (backend == "gloo" && as.point.rfind("mw/nccl/", 0) == 0) {
      as.point = "mw/gloo/" + as.point.substr(8);
      if (!as.mode.nccl.empty()) {
        for (const auto& n : kNcclResults) {
          if (as.mode.nccl == n.name) as.mode.failnum = n.gloo_errno;
        }
        as.mode.failinfo = 0;
      }
    }
  }

  // mode.errno by name: its number, or nullopt (and an error when it is there but unknown).
  // `name` receives the name as written.
  std::optional<int> errnoField(const LV& m, const std::string& aw, const std::string& path,
                                std::string* name) {
    auto e = str(m.get("errno"), aw, path + " mode.errno");
    if (!e) return std::nullopt;
    *name = *e;
    for (const auto& k : kErrnos) {
      if (*e == k.name) return k.number;
    }
    error(aw, path + ": failpoint mode.errno: unknown errno \"" + *e + "\"");
    return std::nullopt;
  }

  void probabilityAndOnce(const LV& m, const std::string& aw, const std::string& path,
                          FailMode& f) {
    f.probability = num(m.get("probability"), aw, path + " mode.probability").value_or(1.0);
    if (!(f.probability > 0 && f.probability <= 1)) {
      error(aw, path + ": failpoint mode.probability: must be in (0, 1]");
    }
    f.once = boolean(m.get("once"), aw, path + " mode.once").value_or(false);
  }

  void failMode(const LV* m, const std::string& aw, const std::string& path, const Scenario& s,
                ActionSpec& as) {
    (void)s;
    if (m == nullptr) return;
    if (m->t != LV::T::kTable) {
      error(aw, path + ": failpoint mode: expected a table like { errno = \"ECONNRESET\" }");
      return;
    }
    onlyFields(*m, aw, path + " mode",
               {"errno", "nccl", "failnum", "async", "probability", "once"});
    FailMode& f = as.mode;
    if (auto e = errnoField(*m, aw, path, &f.errno_name)) f.failnum = *e;
    if (auto n = str(m->get("nccl"), aw, path + " mode.nccl")) {
      f.nccl = *n;
      for (const auto& k : kNcclResults) {
        if (*n == k.name) f.failnum = k.number;
      }
      if (f.failnum == 0)
        error(aw, path + ": failpoint mode.nccl: unknown NCCL result \"" + *n + "\"");
    }
    if (auto n = num(m->get("failnum"), aw, path + " mode.failnum"))
      f.failnum = static_cast<int>(*n);
    if (f.failnum == 0) f.failnum = EIO;
    f.failinfo = boolean(m->get("async"), aw, path + " mode.async").value_or(false) ? 1 : 0;
    probabilityAndOnce(*m, aw, path, f);
  }

  // A POSIX point fails its call with a pinned errno (libfiu's failinfo), never a random one.
  void posixMode(const LV* m, const std::string& aw, const std::string& path, ActionSpec& as) {
    const std::string example = "{ errno = \"ECONNRESET\" }";
    if (m == nullptr || m->t != LV::T::kTable) {
      error(aw, path + ": POSIX failpoint " + as.point + " needs a mode like " + example +
                    ": the errno its call fails with");
      return;
    }
    onlyFields(*m, aw, path + " mode", {"errno", "probability", "once"});
    FailMode& f = as.mode;
    if (auto e = errnoField(*m, aw, path, &f.errno_name)) {
      f.failinfo = static_cast<uintptr_t>(*e);
    } else if (f.errno_name.empty()) {
      error(aw, path + ": POSIX failpoint " + as.point + " needs mode.errno, as in " + example);
    }
    f.failnum = 1;  // the preload only asks whether the point fails; the errno is the failinfo
    probabilityAndOnce(*m, aw, path, f);
  }

  void expect(const LV* v, const std::string& w, Scenario& s) {
    ExpectSpec& e = s.expect;
    e.where = refine(w, "expect: ");  // the line of "expect =", where its verdicts point
    if (v == nullptr) return;
    if (v->t != LV::T::kTable) {
      error(w, "expect: expected a table");
      return;
    }
    onlyFields(*v, w, "expect",
               {"broken", "healthy", "detected_within", "throughput", "replacement_within",
                "no_hang", "no_orphans", "check"});
    for (const auto& name : strList(v->get("healthy"), w, "expect.healthy")) {
      if (!s.worlds.count(name)) error(w, "expect.healthy: no world '" + name + "' in worlds");
      e.healthy.insert(name);
    }
    if (const LV* b = v->get("broken")) {
      e.has_broken = true;
      for (const auto& name : strList(b, w, "expect.broken")) {
        if (!s.worlds.count(name)) error(w, "expect.broken: no world '" + name + "' in worlds");
        e.broken.insert(name);
      }
    }
    if (const LV* d = v->get("detected_within")) {
      if (d->t == LV::T::kTable) {
        for (const auto& [world, dv] : d->fields) {
          auto ms = duration(&dv, w, "expect.detected_within." + world);
          if (!ms) continue;
          if (world == "default") {
            e.detected_within = ms;
          } else if (!s.worlds.count(world)) {
            error(w, "expect.detected_within." + world + ": no world '" + world + "' in worlds");
          } else {
            e.detected_within_world[world] = *ms;
          }
        }
      } else {
        e.detected_within = duration(d, w, "expect.detected_within");
      }
    }
    if (const LV* t = v->get("throughput")) {
      std::vector<const LV*> items;
      if (t->t == LV::T::kTable && t->kindTag() == "throughput_kept") {
        items.push_back(t);
      } else if (t->t == LV::T::kTable && t->fields.empty()) {
        for (const auto& it : t->items) items.push_back(&it);
      } else {
        error(w, "expect.throughput: expected { throughput_kept { world = \"w1\", ratio = 0.9 } }");
      }
      for (size_t i = 0; i < items.size(); ++i) {
        const LV& it = *items[i];
        const std::string p = "expect.throughput[" + std::to_string(i + 1) + "]";
        const std::string tw = it.whereTag(w);
        if (it.t != LV::T::kTable) {
          error(tw, p + ": expected throughput_kept { world = ..., ratio = ... }");
          continue;
        }
        onlyFields(it, tw, p, {"world", "ratio", "window"});
        ThroughputSpec ts;
        ts.where = tw;
        ts.world = str(it.get("world"), tw, p + ".world").value_or("");
        if (!s.worlds.count(ts.world))
          error(tw, p + ".world: no world '" + ts.world + "' in worlds");
        ts.ratio = num(it.get("ratio"), tw, p + ".ratio").value_or(0.9);
        if (!(ts.ratio > 0 && ts.ratio <= 10)) error(tw, p + ".ratio: must be in (0, 10]");
        ts.window = str(it.get("window"), tw, p + ".window").value_or("after");
        if (ts.window != "after" && ts.window != "during") {
          error(tw, p + ".window: expected \"after\" (first fault to the end) or \"during\" "
                        "(first fault to the last)");
        }
        bool has_traffic =
            std::any_of(s.traffic.begin(), s.traffic.end(), [&](const TrafficSpec& t) {
              return std::find(t.worlds.begin(), t.worlds.end(), ts.world) != t.worlds.end();
            });
        if (s.worlds.count(ts.world) && !has_traffic) {
          error(tw, p + ": world '" + ts.world + "' carries no traffic to measure");
        }
        e.throughput.push_back(ts);
      }
      if (s.timeline.empty() && !e.throughput.empty()) {
        error(w,
              "expect.throughput: compares before and after the first fault, but the timeline "
              "has none");
      }
    }
    e.replacement_within = duration(v->get("replacement_within"), w, "expect.replacement_within");
    e.no_hang = boolean(v->get("no_hang"), w, "expect.no_hang").value_or(true);
    e.no_orphans = boolean(v->get("no_orphans"), w, "expect.no_orphans").value_or(true);
    if (const LV* c = v->get("check")) {
      if (c->t != LV::T::kFunc) {
        error(w, "expect.check: expected a function(run) returning ok, message");
      } else {
        e.has_check = true;
        check_ref = c->func_ref;
      }
    }
  }

  std::vector<std::string> errors;
  int check_ref = LUA_NOREF;

 private:
  std::string file_;
  const LoadOptions& opts_;
  std::vector<std::string> lines_;  // the file, read on the first error
};

// Pushes a JSON value as a Lua value. Run in protected mode (pushRun): a Lua error (out of memory)
// jumps out, so nothing here may need a destructor.
void pushJson(lua_State* L, const nlohmann::json& j) {
  luaL_checkstack(L, 3, "the run's data is nested too deep");
  if (j.is_null()) {
    lua_pushnil(L);
  } else if (j.is_boolean()) {
    lua_pushboolean(L, j.get<bool>());
  } else if (j.is_number_integer()) {
    lua_pushinteger(L, j.get<long long>());
  } else if (j.is_number()) {
    lua_pushnumber(L, j.get<double>());
  } else if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    lua_pushlstring(L, s.data(), s.size());
  } else if (j.is_array()) {
    lua_createtable(L, static_cast<int>(j.size()), 0);
    for (size_t i = 0; i < j.size(); ++i) {
      pushJson(L, j[i]);
      lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
    }
  } else {
    lua_createtable(L, 0, static_cast<int>(j.size()));
    for (auto it = j.begin(); it != j.end(); ++it) {
      pushJson(L, it.value());
      lua_setfield(L, -2, it.key().c_str());
    }
  }
}

// lua_CFunction: pushes the JSON value its light userdata argument points at.
int pushRun(lua_State* L) {
  pushJson(L, *static_cast<const nlohmann::json*>(lua_touserdata(L, 1)));
  return 1;
}

}  // namespace

struct LoadedScenario::Lua {
  Lua(std::string file, const LuaLimits& limits) : path(std::move(file)), box(limits) {}
  std::string path;
  LuaSandbox box;
  int check_ref = LUA_NOREF;

  // Lua cuts a long file name short in its messages ("...me/scenarios/x.lua:5: ..."): the file
  // is loaded as chunk "scenario", which its messages then get back as the whole path. A message
  // with no place of its own gets the file's.
  std::string named(const std::string& msg) const {
    const std::string chunk = "scenario:";
    if (msg.rfind(chunk, 0) == 0) return path + ":" + msg.substr(chunk.size());
    if (msg.rfind(path + ":", 0) == 0) return msg;
    return path + ": " + msg;
  }
};

LoadedScenario::LoadedScenario() = default;
LoadedScenario::~LoadedScenario() = default;
LoadedScenario::LoadedScenario(LoadedScenario&&) noexcept = default;
LoadedScenario& LoadedScenario::operator=(LoadedScenario&&) noexcept = default;

std::pair<bool, std::string> LoadedScenario::callCheck(const std::string& run_json) const {
  LuaSandbox& box = lua->box;
  lua_State* L = box.state();
  nlohmann::json run;
  try {
    run = nlohmann::json::parse(run_json);
  } catch (const std::exception& e) {
    return {false, std::string("internal: run data: ") + e.what()};
  }
  box.beginEntry();
  lua_pushcfunction(L, pushRun);
  lua_pushlightuserdata(L, &run);
  if (auto err = box.call(1, 1)) {
    return {false, "expect.check was not called: passing it the run's data: " + *err};
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, lua->check_ref);
  lua_insert(L, -2);
  box.beginEntry();  // the hook's own budget starts now
  if (auto err = box.call(1, 2)) return {false, "expect.check failed: " + lua->named(*err)};
  LuaSandbox::Uncapped uncapped(box);  // a number message is turned into a string in place
  bool ok = lua_toboolean(L, -2) != 0;
  std::string msg = lua_isstring(L, -1) ? lua_tostring(L, -1) : (ok ? "held" : "did not hold");
  lua_pop(L, 2);
  return {ok, msg};
}

LoadResult loadScenario(const std::string& path, const LoadOptions& options) {
  LoadResult out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.errors.push_back(path + ": cannot open: " + std::strerror(errno));
    return out;
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto lua = std::make_unique<LoadedScenario::Lua>(path, options.lua);
  LuaSandbox& box = lua->box;
  lua_State* L = box.state();
  if (L == nullptr) {
    out.errors.push_back(path + ": cannot create a Lua state (out of memory)");
    return out;
  }
  // One entry, one time budget: the preludes, the file, and reading what it declared.
  box.beginEntry();
  if (luaL_loadbufferx(L, kPrelude, std::strlen(kPrelude), "=mw prelude", "t") != LUA_OK) {
    out.errors.push_back(std::string("internal: scenario prelude: ") + lua_tostring(L, -1));
    return out;
  }
  lua_pushstring(L, path.c_str());
  lua_pushinteger(L, static_cast<lua_Integer>(options.seed.value_or(0x5eed)));
  std::optional<std::string> err = box.call(2, 1);  // leaves the list of scenarios at index 1
  if (!err) err = box.seal();
  if (err) {
    out.errors.push_back(path + ": internal: scenario prelude: " + *err);
    return out;
  }
  const int loaded_chunk = luaL_loadbufferx(L, text.data(), text.size(), "=scenario", "t");
  if (loaded_chunk != LUA_OK) {
    out.errors.push_back(
        lua->named(loaded_chunk == LUA_ERRMEM ? box.memoryMessage() : lua_tostring(L, -1)));
    return out;
  }
  if ((err = box.call(0, 0))) {
    out.errors.push_back(lua->named(*err));
    return out;
  }
  // Reading the tables is the harness's work, in unprotected Lua calls: the cap must not fail it.
  LuaSandbox::Uncapped uncapped(box);
  lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, 1));
  if (n != 1) {
    out.errors.push_back(path + ":1: a scenario file calls scenario { ... } exactly once (found " +
                         std::to_string(n) + ")");
    return out;
  }
  lua_rawgeti(L, 1, 1);
  std::string conv_err;
  std::vector<const void*> open;
  LV root = convert(L, -1, 0, &conv_err, &open);
  lua_settop(L, 0);
  Validator v(path, options);
  if (!conv_err.empty()) v.error(root.whereTag(path + ":1"), conv_err);
  Scenario s = v.scenario(root);
  if (!v.errors.empty()) {
    out.errors = v.errors;
    return out;
  }
  LoadedScenario loaded;
  lua->check_ref = v.check_ref;
  loaded.scenario = std::move(s);
  loaded.lua = std::move(lua);
  out.loaded = std::move(loaded);
  return out;
}

std::optional<Ms> parseDuration(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return std::nullopt;
  }
  if (v < 0 || !std::isfinite(v)) return std::nullopt;
  std::string unit = text.substr(pos);
  double ms = 0;
  if (unit == "ms") {
    ms = v;
  } else if (unit == "s" || unit.empty()) {
    ms = v * 1000;
  } else if (unit == "m" || unit == "min") {
    ms = v * 60000;
  } else if (unit == "us") {
    ms = v / 1000;
  } else if (unit == "h") {
    ms = v * 3600000;
  } else {
    return std::nullopt;
  }
  return Ms(static_cast<long long>(std::llround(ms)));
}

std::optional<uint64_t> parseBytes(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return std::nullopt;
  }
  if (v < 0 || !std::isfinite(v)) return std::nullopt;
  std::string unit = text.substr(pos);
  static const std::map<std::string, double> units = {
      {"", 1},     {"B", 1},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},     {"kB", 1e3}};
  auto it = units.find(unit);
  if (it == units.end()) return std::nullopt;
  return static_cast<uint64_t>(v * it->second);
}

std::string ActionSpec::describe() const {
  if (kind == "kill") return "kill " + role + " " + signal_name;
  if (kind == "failpoint") {
    const bool posix = chaos::isPosixPoint(point);
    std::string m = "failpoint " + point + " in " + role;
    if (posix) {
      m += " errno=" + std::to_string(mode.failinfo) + " (" + mode.errno_name + ")";
    } else {
      m += " failnum=" + std::to_string(mode.failnum);
      if (!mode.nccl.empty()) m += " (" + mode.nccl + ")";
      if (!mode.errno_name.empty()) m += " (" + mode.errno_name + ")";
      if (mode.failinfo) m += " async";
    }
    if (mode.probability < 1) m += " p=" + std::to_string(mode.probability).substr(0, 5);
    if (mode.once) m += " once";
    return m;
  }
  if (kind == "clear_failpoint") return "clear failpoint " + point + " in " + role;
  auto list = [](const std::vector<std::string>& v) {
    std::string o;
    for (const auto& x : v) o += (o.empty() ? "" : ",") + x;
    return "{" + o + "}";
  };
  if (kind == "partition") {
    return std::string(loud ? "loud" : "silent") + (oneway ? " one-way" : "") + " partition " +
           list(hosts_a) + (oneway ? " -> " : " | ") + list(hosts_b);
  }
  if (kind == "heal") return "heal the network";
  if (kind == "loss")
    return "loss " + std::to_string(static_cast<int>(loss * 100 + 0.5)) + "% at " + host;
  if (kind == "bandwidth") return "bandwidth " + rate + " from " + host;
  if (kind == "delay") {
    return "delay " + std::to_string(delay_ms) + "ms (jitter " + std::to_string(jitter_ms) +
           "ms) from " + host;
  }
  if (kind == "remove_world" || kind == "add_world") return kind + " " + world + " in " + role;
  return kind + " " + role;
}

std::vector<std::string> Scenario::worldsOf(const std::string& role) const {
  std::vector<std::string> out;
  auto it = roles.find(role);
  if (it == roles.end()) return out;
  for (const auto& [w, r] : it->second.ranks) out.push_back(w);
  return out;
}

std::vector<std::string> Scenario::hosts() const {
  std::set<std::string> hs;
  for (const auto& [name, r] : roles) {
    if (!r.host.empty()) hs.insert(r.host);
  }
  return {hs.begin(), hs.end()};
}

std::vector<std::string> Scenario::worldsTouchedBy(const ActionSpec& a) const {
  std::vector<std::string> out;
  for (const auto& [world, w] : worlds) {
    std::set<std::string> on;
    for (const auto& role : membersOf(world)) on.insert(roles.at(role).host);
    auto any = [&](const std::vector<std::string>& hs) {
      return std::any_of(hs.begin(), hs.end(),
                         [&](const std::string& h) { return on.count(h) > 0; });
    };
    bool touched = a.kind == "partition" ? any(a.hosts_a) && any(a.hosts_b)
                   : a.kind == "heal"    ? false
                                         : on.count(a.host) > 0;
    if (touched) out.push_back(world);
  }
  return out;
}

std::vector<std::string> Scenario::membersOf(const std::string& world) const {
  std::map<int, std::string> byRank;
  for (const auto& [name, r] : roles) {
    auto it = r.ranks.find(world);
    if (it != r.ranks.end()) byRank[it->second] = name;
  }
  std::vector<std::string> out;
  for (auto& [rank, name] : byRank) out.push_back(name);
  return out;
}

namespace {
std::string posixList() {
  std::string out;
  for (const auto& p : chaos::posixPoints()) {
    std::string name = p.name;
    out +=
        "    " + name + std::string(name.size() < 24 ? 24 - name.size() : 1, ' ') + p.what + "\n";
  }
  return out;
}
}  // namespace

std::string describeApi() {
  return R"(Scenario API (docs/scenarios.md has the whole reference)

scenario { name, description, duration, warmup, seed, worlds, roles, traffic, timeline, expect }

worlds   name = { backend = "gloo"|"nccl", heartbeat = "1s", op_timeout = "10s",
                  rejoin = false, start = true, size = n }
roles    name = { worlds = { world = rank, ... }, device = "auto"|"cpu"|"gpu"|"cuda:N" }

traffic patterns
  gather_to_leader { worlds = {...}, bytes = "1MiB", dtype = "float32", rate = 0 }
                     rank 0 of each world receives from every other member (the MultiWorld demo)
  ring_allreduce   { world = "w", bytes, dtype, rate }    every member all-reduces
  broadcast        { world = "w", root = 0, bytes, dtype, rate }
  pipeline         { worlds = { "s1", "s2", ... }, bytes, dtype, rate }
                     each 2-member world is a link of a chain: rank 0 sends to rank 1

roles may sit on simulated hosts: { host = "h1", worlds = ... } (network namespaces; root)

helpers
  local worlds, roles = star { workers = { "a", "b" } (or a count), leader = "leader",
                               prefix = "w", hosts = false, world = { heartbeat = "500ms" },
                               each = { w2 = { rejoin = true } } }
                     a leader and one 2-member world per worker (w1, w2, ...; leader rank 0)

faults (timeline = { at("2s", <fault>), ... })
  kill(role [, signal])          any signal by name ("SIGTERM", "USR1") or number; default SIGKILL
  pause(role)   resume(role)                          SIGSTOP / SIGCONT
  restart(role)                                       kill it and start it again; it rejoins
  failpoint(role, point, { errno = "ECONNRESET" | nccl = "ncclRemoteError" | failnum = n,
                           async = false, probability = 1.0, once = false })
  clear_failpoint(role, point)
  remove_world(role, world)   add_world(role, world)
  partition { a = { "h1" }, b = { "h2" }, mode = "silent"|"loud", oneway = false }
  heal()   loss(host, 0.2)   bandwidth(host, "10mbit")   delay(host, "50ms" [, "10ms"])
  failpoints: mw/{backend}/<op>/<world>, mw/{backend}/init/<world>, mw/store/<call>/<world>,
              mw/store/link/<world>, mw/heartbeat/<world> (docs/failpoints.md)
  POSIX failpoints (libfiu's preload; the whole process, errno pinned: { errno = "EPIPE" }):
)" + posixList() +
         R"(
nemesis = { faults = { "partition", "loss", "pause", "kill" }, roles = {...}, hosts = {...},
            gap = "2s", hold = "400ms" }   seeded random faults, each undone after hold
            (mwchaos run --duration 10m turns any scenario into a soak)

expectations (expect = { ... })
  broken = { "w2" }                 exactly these worlds break, no other
  healthy = { "w1" }                these worlds do not break (others not judged)
  detected_within = "100ms"         or { w2 = "700ms", default = "100ms" }
  throughput = { throughput_kept { world = "w1", ratio = 0.9, window = "after"|"during" } }
  replacement_within = "3s"         a restarted member's world is healthy again within
  no_hang = true, no_orphans = true
  check = function(run) return ok, message end        a Lua hook over the run's data
)";
}

}  // namespace mw::harness
