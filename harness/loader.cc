// Loading scenario files: Lua 5.4 runs the file in a sandbox; the table given to scenario{} is
// converted to a generic value tree, then validated into the Scenario model with messages that
// name the file, line and field.
#include "harness/loader.h"

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

#include "chaos/posix_points.h"
#include "harness/lua_sandbox.h"
#include "harness/validator.h"

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
function scancel_step(role, signal)
  return { __kind = "scancel_step", role = role, signal = signal, __where = where() }
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

using loader::convert;
using loader::LV;
using loader::Validator;

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

scenario { name, description, duration, warmup, startup, seed, worlds, roles, traffic, timeline,
           expect }
values   times "250us", "500ms", "2s", "1h" or seconds: 0 to 24 h, and each field's own range
         (duration 500 ms to 24 h, heartbeat 50 ms to 1 h, op_timeout 1 ms to 24 h); seed a whole
         number 0 to 2^53-1; rate 0 or 0.001 to 1000000 per second; never NaN or infinite; no
         NUL byte in a string (docs/scenarios.md, "Numbers and strings")

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
roles may run your program instead of mw_worker (docs/scenarios.md, "Program roles"):
         name = { worlds = {...}, program = { "python3", "serve.py", "--port", "${world.w1.port}" },
                  env = { NAME = "value" }, cwd = "dir", stop_within = "5s" }
         placeholders: ${world.W.addr} ${world.W.port} ${world.W.rank} ${world.W.size}
                       ${world.W.backend} ${world.W.device} ${world.W.heartbeat_ms}
                       ${world.W.op_timeout_ms} ${token} ${role}
         stop_within: its time to exit after SIGTERM at the end (default 5 s), else hung
         the program must join with its worlds' options (else exit 1); runtime failpoints
         (mw/...) work on it; refused: traffic patterns on its worlds, remove_world, add_world
         and POSIX failpoints (posix/...)

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
  scancel_step(role [, signal])  Slurm launcher only: scancel of the step holding the role's
                                 host (the role alone on it); signal KILL, TERM, INT, HUP, ...
  partition { a = { "h1" }, b = { "h2" }, mode = "silent"|"loud", oneway = false }
  heal()   loss(host, 0.2)   bandwidth(host, "10mbit")   delay(host, "50ms" [, "10ms"])
  failpoints: mw/{backend}/<op>/<world>, mw/{backend}/init/<world>, mw/store/<call>/<world>,
              mw/store/link/<world>, mw/join/through/<world>, mw/heartbeat/<world>
              (docs/failpoints.md)
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
               throughput_kept { metric = "requests", role = "frontend", ratio = 0.5 }
                                    a program role's own metric (mw::reportMetric)
  replacement_within = "3s"         a restarted member's world is healthy again within
  no_hang = true, no_orphans = true
  data_intact = true                every element the built-in traffic receives is what was sent
                                    (the default); { off = "why" } turns it off
  app_checks = true                 no check a program role reported (mw::reportCheck) failed
  check = function(run) return ok, message end        a Lua hook over the run's data
)";
}

}  // namespace mw::harness
