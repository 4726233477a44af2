// Loading an inventory file: the sandbox runs it, the table it returns becomes a value tree
// (harness/lua_value.h), and each field is checked into the model's Inventory. The scenario
// validator's helpers (harness/validator.h) give the types, the ranges and the line a field is on.
#include "harness/inventory_loader.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <lua.hpp>

#include "harness/lua_value.h"
#include "harness/validator.h"

namespace mw::harness {

namespace {

using loader::LV;

// The edit distance of `a` and `b` (insertions, deletions, substitutions).
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "; did you mean 'x'?" for the closest of `known` to `word` when it is close (two edits at most,
// or the start of it: "lease" for "lease_ms"), else "".
std::string suggestion(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;
  for (const auto& k : known) {
    const bool start = word.size() >= 3 && k.rfind(word, 0) == 0;
    const size_t d = start ? 1 : distance(word, k);
    if (d < best_d && d < std::max<size_t>(k.size(), 2)) {
      best = k;
      best_d = d;
    }
  }
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

class InventoryReader {
 public:
  explicit InventoryReader(const std::string& path) : path_(path), v_(path, opts_) {}

  std::vector<std::string>& errors() { return v_.errors; }

  // The line of field `path` ("hosts.h2.dev"): each part looked for from its parent's line on.
  std::string whereOf(const std::string& path) {
    std::string where = path_ + ":1";
    size_t start = 0;
    while (start <= path.size()) {
      size_t dot = path.find('.', start);
      if (dot == std::string::npos) dot = path.size();
      std::string part = path.substr(start, dot - start);
      part = part.substr(0, part.find('['));
      if (!part.empty()) where = v_.refine(where, part + ": ");
      start = dot + 1;
    }
    return where;
  }

  // Records "file:line: msg", the line that of the field `msg` names first.
  void problem(const std::string& msg) {
    std::string path = msg.substr(0, msg.find(": "));
    // hosts.h1.target of h1 = "node7" is written on h1's line.
    for (const auto& h : string_hosts_) {
      if (path == "hosts." + h + ".target") path = "hosts." + h;
    }
    v_.errors.push_back(whereOf(path) + ": " + msg);
  }

  // Every field of `t` not in `allowed`, refused with the closest known one.
  void onlyFields(const LV& t, const std::string& path, const std::vector<std::string>& allowed) {
    for (const auto& f : t.fields) {
      if (std::find(allowed.begin(), allowed.end(), f.first) != allowed.end()) continue;
      const std::string p = path.empty() ? f.first : path + "." + f.first;
      problem(p + ": unknown field" + suggestion(f.first, allowed) +
              " (expected one of: " + listed(allowed) + ")");
    }
    if (!t.items.empty()) {
      problem((path.empty() ? "inventory" : path) +
              ": expected named fields, not a list (one of: " + listed(allowed) + ")");
    }
  }

  // The table at `v` (nullptr: absent). Anything else is an error naming `path`.
  const LV* table(const LV* v, const std::string& path) {
    if (v == nullptr) return nullptr;
    if (v->t != LV::T::kTable) {
      problem(path + ": expected a table { ... }, got " + v->show());
      return nullptr;
    }
    return v;
  }

  std::optional<std::string> str(const LV* v, const std::string& path) {
    return v_.str(v, whereOf(parentOf(path)), path);
  }
  std::optional<int64_t> whole(const LV* v, const std::string& path, int64_t lo, int64_t hi) {
    return v_.whole(v, whereOf(parentOf(path)), path, lo, hi);
  }

  Inventory read(const LV& root, const InventoryEnv& env) {
    Inventory inv;
    inv.source = path_;
    onlyFields(root, "",
               {"launcher", "hosts", "ssh", "slurm", "agent", "exempt_ports", "lease_ms"});
    launcher(root.get("launcher"), inv);
    hosts(table(root.get("hosts"), "hosts"), inv);
    ssh(table(root.get("ssh"), "ssh"), inv);
    slurm(table(root.get("slurm"), "slurm"), inv, env);
    if (auto a = str(root.get("agent"), "agent")) inv.agent = *a;
    exemptPorts(root.get("exempt_ports"), inv);
    if (auto l = whole(root.get("lease_ms"), "lease_ms", kMinLeaseMs, kMaxLeaseMs)) {
      inv.lease_ms = static_cast<int>(*l);
    }
    if (errors().empty()) {
      for (const auto& p : inventoryProblems(inv)) problem(p);
    }
    return inv;
  }

 private:
  static std::string parentOf(const std::string& path) {
    const size_t dot = path.rfind('.');
    return dot == std::string::npos ? "" : path.substr(0, dot);
  }

  void launcher(const LV* v, Inventory& inv) {
    const std::vector<std::string> names = {"local", "netns", "ssh", "slurm"};
    if (v == nullptr) {
      problem(
          "launcher: every inventory names its launcher: \"local\", \"netns\", \"ssh\" or "
          "\"slurm\"");
      return;
    }
    auto name = str(v, "launcher");
    if (!name) return;
    if (auto l = parseLauncher(*name)) {
      inv.launcher = *l;
      launcher_known_ = true;
    } else {
      problem("launcher: unknown launcher \"" + *name + "\"" + suggestion(*name, names) +
              " (expected one of: local, netns, ssh, slurm)");
    }
  }

  void hosts(const LV* v, Inventory& inv) {
    if (v == nullptr) return;
    if (!v->items.empty()) {
      problem(
          "hosts: expected named hosts like { h1 = \"node7\", h2 = { target = \"node8\" } }, "
          "not a list");
      return;
    }
    for (const auto& [name, spec] : v->fields) {
      const std::string path = "hosts." + name;
      InventoryHost h;
      h.name = name;
      if (spec.t == LV::T::kStr) {
        string_hosts_.push_back(name);
        if (auto t = str(&spec, path)) h.target = *t;
      } else if (spec.t == LV::T::kTable) {
        onlyFields(spec, path, {"target", "address", "dev", "wrap"});
        h.target = str(spec.get("target"), path + ".target").value_or("");
        h.address = str(spec.get("address"), path + ".address").value_or("");
        h.dev = str(spec.get("dev"), path + ".dev").value_or("");
        h.wrap = words(spec.get("wrap"), path + ".wrap");
      } else {
        problem(path +
                ": expected a target like \"node7\" or a table { target = \"node7\", "
                "address = \"10.0.0.7\", dev = \"eth1\" }, got " +
                spec.show());
        continue;
      }
      inv.hosts.push_back(std::move(h));
    }
  }

  // A launcher's own section, given for another launcher, is an error.
  bool sectionFits(const char* section, Launcher owner, const Inventory& inv) {
    if (!launcher_known_ || inv.launcher == owner) return true;
    problem(std::string(section) + ": this section is for launcher " + launcherName(owner) +
            ", and the launcher is " + launcherName(inv.launcher));
    return false;
  }

  void ssh(const LV* v, Inventory& inv) {
    if (v == nullptr || !sectionFits("ssh", Launcher::kSsh, inv)) return;
    onlyFields(*v, "ssh", {"user", "port", "identity", "options"});
    inv.ssh.user = str(v->get("user"), "ssh.user").value_or("");
    if (auto p = whole(v->get("port"), "ssh.port", 1, 65535)) inv.ssh.port = static_cast<int>(*p);
    inv.ssh.identity = str(v->get("identity"), "ssh.identity").value_or("");
    const LV* o = table(v->get("options"), "ssh.options");
    if (o == nullptr) return;
    if (!o->items.empty()) {
      problem(
          "ssh.options: expected named options like { StrictHostKeyChecking = \"no\" }, not "
          "a list");
      return;
    }
    for (const auto& [key, value] : o->fields) {  // sorted by key
      const std::string path = "ssh.options." + key;
      if (value.t == LV::T::kNum) {
        if (auto n = whole(&value, path, 0, 1LL << 31)) {
          inv.ssh.options.push_back(key + "=" + std::to_string(*n));
        }
      } else if (value.t == LV::T::kStr) {
        if (auto s = str(&value, path)) inv.ssh.options.push_back(key + "=" + *s);
      } else {
        problem(path + ": expected a string or a whole number, got " + value.show());
      }
    }
  }

  void slurm(const LV* v, Inventory& inv, const InventoryEnv& env) {
    if (v != nullptr && sectionFits("slurm", Launcher::kSlurm, inv)) {
      onlyFields(*v, "slurm", {"slurmctld_port", "slurmd_port", "srun_port_range"});
      if (auto p = whole(v->get("slurmctld_port"), "slurm.slurmctld_port", 1, 65535)) {
        inv.slurm.slurmctld_port = static_cast<int>(*p);
      }
      if (auto p = whole(v->get("slurmd_port"), "slurm.slurmd_port", 1, 65535)) {
        inv.slurm.slurmd_port = static_cast<int>(*p);
      }
      if (auto r = str(v->get("srun_port_range"), "slurm.srun_port_range")) {
        std::string why;
        inv.slurm.srun_ports = parsePortRange(*r, &why);
        if (!inv.slurm.srun_ports) problem("slurm.srun_port_range: " + why);
      }
    }
    if (inv.launcher != Launcher::kSlurm) return;
    inv.slurm.allocation.job_id = env.slurm_job_id;
    if (env.slurm_job_nodelist.empty()) return;
    auto nodes = expandHostlist(env.slurm_job_nodelist);
    if (!nodes.ok()) {
      errors().push_back(path_ + ": $SLURM_JOB_NODELIST: " + nodes.status().message());
      return;
    }
    inv.slurm.allocation.nodes = std::move(nodes.value());
  }

  // A list of strings ({ "unshare", "--time" }); {} when absent.
  std::vector<std::string> words(const LV* v, const std::string& path) {
    std::vector<std::string> out;
    if (v == nullptr) return out;
    if (v->t != LV::T::kTable || !v->fields.empty()) {
      problem(path + ": expected a list of words like { \"unshare\", \"--time\" }, got " +
              v->show());
      return out;
    }
    for (size_t i = 0; i < v->items.size(); ++i) {
      if (auto w = str(&v->items[i], path + "[" + std::to_string(i + 1) + "]")) out.push_back(*w);
    }
    return out;
  }

  void exemptPorts(const LV* v, Inventory& inv) {
    if (v == nullptr) return;
    if (v->t != LV::T::kTable || !v->fields.empty()) {
      problem(
          "exempt_ports: expected a list of ports and ranges like { 22, \"60001-63000\" }, "
          "got " +
          v->show());
      return;
    }
    for (size_t i = 0; i < v->items.size(); ++i) {
      const LV& item = v->items[i];
      const std::string path = "exempt_ports[" + std::to_string(i + 1) + "]";
      if (item.t == LV::T::kNum) {
        if (auto p = v_.whole(&item, whereOf("exempt_ports"), path, 1, 65535)) {
          inv.exempt_ports.push_back({static_cast<int>(*p), static_cast<int>(*p)});
        }
      } else if (item.t == LV::T::kStr) {
        std::string why;
        if (auto r = parsePortRange(item.s, &why)) {
          inv.exempt_ports.push_back(*r);
        } else {
          problem(path + ": " + why);
        }
      } else {
        problem(path + ": expected a port (22) or a range (\"60001-63000\"), got " + item.show());
      }
    }
  }

  std::string path_;
  LoadOptions opts_;  // unused by the helpers used here; the validator keeps a reference
  loader::Validator v_;
  std::vector<std::string> string_hosts_;  // hosts written as h1 = "target"
  bool launcher_known_ = false;
};

// Lua names the chunk "inventory"; its messages get the whole path back.
std::string named(const std::string& path, const std::string& msg) {
  const std::string chunk = "inventory:";
  if (msg.rfind(chunk, 0) == 0) return path + ":" + msg.substr(chunk.size());
  if (msg.rfind(path + ":", 0) == 0) return msg;
  return path + ": " + msg;
}

}  // namespace

InventoryEnv InventoryEnv::fromProcess() {
  InventoryEnv env;
  if (const char* id = std::getenv("SLURM_JOB_ID")) env.slurm_job_id = id;
  if (const char* nodes = std::getenv("SLURM_JOB_NODELIST")) env.slurm_job_nodelist = nodes;
  return env;
}

InventoryLoad loadInventory(const std::string& path, const LuaLimits& limits,
                            const InventoryEnv& env) {
  InventoryLoad out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.errors.push_back(path + ": cannot open the inventory: " + std::strerror(errno));
    return out;
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LuaSandbox box(limits);
  lua_State* L = box.state();
  if (L == nullptr) {
    out.errors.push_back(path + ": cannot create a Lua state (out of memory)");
    return out;
  }
  box.beginEntry();  // one entry: sealing, the file, and reading what it returned
  if (auto err = box.seal()) {
    out.errors.push_back(path + ": internal: sealing the sandbox: " + *err);
    return out;
  }
  const int loaded = luaL_loadbufferx(L, text.data(), text.size(), "=inventory", "t");
  if (loaded != LUA_OK) {
    out.errors.push_back(
        named(path, loaded == LUA_ERRMEM ? box.memoryMessage() : lua_tostring(L, -1)));
    return out;
  }
  if (auto err = box.call(0, 1)) {
    out.errors.push_back(named(path, *err));
    return out;
  }
  LuaSandbox::Uncapped uncapped(box);
  if (!lua_istable(L, -1)) {
    out.errors.push_back(path +
                         ":1: an inventory file returns its table: return { launcher = "
                         "\"ssh\", hosts = { h1 = \"node7\" } } (it returned " +
                         luaL_typename(L, -1) + ")");
    return out;
  }
  std::string conv_err;
  std::vector<const void*> open;
  LV root = loader::convert(L, -1, 0, &conv_err, &open);
  lua_settop(L, 0);
  if (!conv_err.empty()) {
    out.errors.push_back(path + ":1: " + conv_err);
    return out;
  }
  InventoryReader reader(path);
  Inventory inv = reader.read(root, env);
  if (!reader.errors().empty()) {
    out.errors = reader.errors();
    return out;
  }
  out.inventory = std::move(inv);
  return out;
}

}  // namespace mw::harness
