// The inventory's rules: launcher names, port ranges, the problems of an inventory, the control
// plane's exempt ports, binding a scenario's logical hosts, and Slurm hostlist expressions.
#include "model/inventory.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "model/net_words.h"
#include "multiworld/world_manager.h"

namespace mw::harness {

namespace {

constexpr int kMaxPort = 65535;

bool isDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Whether every character of `s` is a letter, a digit or one of `extra`.
bool onlyChars(std::string_view s, std::string_view extra) {
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string_view::npos;
  });
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\0') {
      out += "\\0";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool hasControl(std::string_view s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return std::iscntrl(static_cast<unsigned char>(c)) != 0; });
}

// Characters a target or an address may hold: a host name, an IPv4 or IPv6 address (with a zone
// after %, or in brackets), and for an ssh target a user@ before it.
constexpr std::string_view kAddressChars = "_.:%[]-";

void portProblem(int port, const std::string& path, std::vector<std::string>* out) {
  if (port < 1 || port > kMaxPort) {
    out->push_back(path + ": " + std::to_string(port) + " is out of range (ports are 1 to 65535)");
  }
}

void rangeProblem(PortRange r, const std::string& path, std::vector<std::string>* out) {
  if (r.first < 1 || r.first > kMaxPort || r.last < 1 || r.last > kMaxPort) {
    out->push_back(path + ": " + portRangeText(r) + " is out of range (ports are 1 to 65535)");
  } else if (r.first > r.last) {
    out->push_back(path + ": " + portRangeText(r) +
                   " is reversed (the first port must not be above the last)");
  }
}

// The problem of `value` as a target or address (`what`), or "".
std::string addressProblem(std::string_view value, bool may_have_user) {
  std::string_view host = value;
  if (may_have_user) {
    const size_t at = value.find('@');
    if (at != std::string_view::npos) {
      std::string_view user = value.substr(0, at);
      host = value.substr(at + 1);
      if (user.empty() || !onlyChars(user, "_.-") || user[0] == '-') {
        return quoted(value) + " has a malformed user before '@' (letters, digits, _ . -)";
      }
    }
  }
  if (host.empty()) return quoted(value) + " names no host";
  if (host[0] == '-') {
    return quoted(value) + " starts with '-' (ssh and srun would read it as an option)";
  }
  if (!onlyChars(host, kAddressChars)) {
    return quoted(value) + " is no host name or address (letters, digits and _ . : % [ ] - only; " +
           (may_have_user ? "user@ before it" : "no user@ here") + ")";
  }
  return "";
}

void hostProblems(const Inventory& inv, std::vector<std::string>* out) {
  const bool takes_hosts = inv.launcher == Launcher::kSsh || inv.launcher == Launcher::kSlurm;
  if (!takes_hosts && !inv.hosts.empty()) {
    out->push_back(std::string("hosts: launcher ") + launcherName(inv.launcher) +
                   (inv.launcher == Launcher::kNetns
                        ? " makes one network namespace per scenario host itself"
                        : " runs every scenario host on this machine") +
                   ": hosts are for launchers ssh and slurm");
    return;
  }
  if (inv.launcher == Launcher::kSsh && inv.hosts.empty()) {
    out->push_back("hosts: launcher ssh needs at least one host: hosts = { h1 = \"node7\" }");
  }
  std::map<std::string, std::string> seen_names, seen_targets, seen_addresses;
  for (const auto& h : inv.hosts) {
    const std::string path = "hosts." + h.name;
    if (!validWorldName(h.name)) {
      out->push_back(path + ": a host name is 1-128 characters of [A-Za-z0-9_.-]");
    }
    if (!seen_names.emplace(h.name, h.name).second) {
      out->push_back(path + ": listed twice");
      continue;
    }
    const bool ssh = inv.launcher == Launcher::kSsh;
    if (h.target.empty()) {
      out->push_back(path + ".target: every host needs a target (" +
                     (ssh ? "what ssh connects to: \"node7\" or \"user@10.0.0.5\")"
                          : "the Slurm node it runs on)"));
    } else if (std::string why = addressProblem(h.target, ssh); !why.empty()) {
      out->push_back(path + ".target: " + why);
    } else if (ssh && !inv.ssh.user.empty() && h.target.find('@') != std::string::npos) {
      out->push_back(path + ".target: " + quoted(h.target) +
                     " names a user and ssh.user is set too: give one of them");
    } else if (auto [it, fresh] = seen_targets.emplace(h.target, h.name); !fresh) {
      out->push_back(path + ".target: " + quoted(h.target) + " is " + it->second +
                     "'s too: each logical host needs a real host of its own (no partition "
                     "could separate two on one)");
    }
    // The data plane's address (given, or the target's host part) is a firewall rule's: IPv4.
    {
      std::string data = !h.address.empty() ? h.address : h.target.substr(h.target.find('@') + 1);
      if (data.size() > 2 && data.front() == '[') data = data.substr(1, data.size() - 2);
      if (data.find(':') != std::string::npos) {
        out->push_back(path + (h.address.empty() ? ".target" : ".address") + ": " + quoted(data) +
                       " is an IPv6 address: network faults are IPv4 firewall rules, and a "
                       "partition between IPv6 addresses would cut nothing; give " +
                       path + ".address the host's IPv4 address on the data plane");
      }
    }
    if (!h.address.empty()) {
      if (std::string why = addressProblem(h.address, false); !why.empty()) {
        out->push_back(path + ".address: " + why);
      } else if (auto [it, fresh] = seen_addresses.emplace(h.address, h.name); !fresh) {
        out->push_back(path + ".address: " + quoted(h.address) + " is " + it->second +
                       "'s too: each logical host needs an address of its own");
      }
    }
    for (size_t i = 0; i < h.wrap.size(); ++i) {
      const std::string& w = h.wrap[i];
      if (w.empty() || !onlyChars(w, "_./+@%:=,~-") || (i == 0 && w[0] == '-')) {
        out->push_back(path + ".wrap[" + std::to_string(i + 1) + "]: " + quoted(w) +
                       " is no plain word (letters, digits and _ . / + @ % : = , ~ - only; the "
                       "first a program, not an option)");
      }
    }
    if (!h.dev.empty() && !isInterfaceName(h.dev)) {
      out->push_back(path + ".dev: " + quoted(h.dev) +
                     " is no interface name (1 to 15 letters, digits, _ . -)");
    }
  }
}

// Natural order: runs of digits compare as numbers ("h2" before "h10").
bool naturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      std::string_view x(a.data() + i, i2 - i), y(b.data() + j, j2 - j);
      while (x.size() > 1 && x[0] == '0') x.remove_prefix(1);
      while (y.size() > 1 && y[0] == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j || (a.size() - i == b.size() - j && a < b);
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Status invalid(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }

}  // namespace

const char* launcherName(Launcher l) {
  switch (l) {
    case Launcher::kLocal:
      return "local";
    case Launcher::kNetns:
      return "netns";
    case Launcher::kSsh:
      return "ssh";
    case Launcher::kSlurm:
      return "slurm";
  }
  return "?";
}

std::optional<Launcher> parseLauncher(std::string_view name) {
  for (Launcher l : {Launcher::kLocal, Launcher::kNetns, Launcher::kSsh, Launcher::kSlurm}) {
    if (name == launcherName(l)) return l;
  }
  return std::nullopt;
}

std::string portRangeText(PortRange r) {
  return r.first == r.last ? std::to_string(r.first)
                           : std::to_string(r.first) + "-" + std::to_string(r.last);
}

std::optional<PortRange> parsePortRange(std::string_view text, std::string* why) {
  const size_t dash = text.find('-');
  std::string_view a = text.substr(0, dash);
  std::string_view b = dash == std::string_view::npos ? a : text.substr(dash + 1);
  if (!isDigits(a) || !isDigits(b)) {
    *why = quoted(text) + " is no port: expected a port (22) or a range (\"60001-63000\")";
    return std::nullopt;
  }
  if (a.size() > 5 || b.size() > 5 || std::stoi(std::string(a)) < 1 ||
      std::stoi(std::string(a)) > kMaxPort || std::stoi(std::string(b)) < 1 ||
      std::stoi(std::string(b)) > kMaxPort) {
    *why = quoted(text) + " is out of range (ports are 1 to 65535)";
    return std::nullopt;
  }
  PortRange r{std::stoi(std::string(a)), std::stoi(std::string(b))};
  if (r.first > r.last) {
    *why = quoted(text) + " is reversed (the first port must not be above the last)";
    return std::nullopt;
  }
  return r;
}

std::vector<std::string> inventoryProblems(const Inventory& inv) {
  std::vector<std::string> out;
  if (inv.lease_ms < kMinLeaseMs || inv.lease_ms > kMaxLeaseMs) {
    out.push_back("lease_ms: " + std::to_string(inv.lease_ms) + " is out of range (" +
                  std::to_string(kMinLeaseMs) + " to " + std::to_string(kMaxLeaseMs) + ")");
  }
  // The agent's path reaches a remote shell (ssh runs its command through one): no character
  // that shell would read as more than a path.
  if (inv.agent.empty() || inv.agent[0] == '-' || !onlyChars(inv.agent, "_./+@%:=,~-")) {
    out.push_back("agent: " + quoted(inv.agent) +
                  " is no program path (letters, digits and _ . / + @ % : = , ~ - only, not "
                  "starting with '-')");
  }
  for (size_t i = 0; i < inv.exempt_ports.size(); ++i) {
    rangeProblem(inv.exempt_ports[i], "exempt_ports[" + std::to_string(i + 1) + "]", &out);
  }
  portProblem(inv.ssh.port, "ssh.port", &out);
  if (!inv.ssh.user.empty() && (inv.ssh.user[0] == '-' || !onlyChars(inv.ssh.user, "_.-"))) {
    out.push_back("ssh.user: " + quoted(inv.ssh.user) +
                  " is no user name (letters, digits, _ . -; not starting with '-')");
  }
  if (hasControl(inv.ssh.identity)) {
    out.push_back("ssh.identity: " + quoted(inv.ssh.identity) + " holds a control character");
  }
  for (const auto& o : inv.ssh.options) {
    const size_t eq = o.find('=');
    std::string_view key = std::string_view(o).substr(0, eq);
    const std::string path = "ssh.options." + std::string(key);
    if (eq == std::string::npos || key.empty() || !onlyChars(key, "")) {
      out.push_back("ssh.options: " + quoted(o) + " is no Key=Value (an ssh_config keyword)");
    } else if (eq + 1 == o.size() || hasControl(std::string_view(o).substr(eq + 1))) {
      out.push_back(path + ": " + quoted(o.substr(eq + 1)) +
                    " is empty or holds a control character");
    }
  }
  portProblem(inv.slurm.slurmctld_port, "slurm.slurmctld_port", &out);
  portProblem(inv.slurm.slurmd_port, "slurm.slurmd_port", &out);
  if (inv.slurm.srun_ports) rangeProblem(*inv.slurm.srun_ports, "slurm.srun_port_range", &out);
  hostProblems(inv, &out);
  return out;
}

std::vector<PortRange> exemptPorts(const Inventory& inv) {
  std::vector<PortRange> all = inv.exempt_ports;
  if (inv.launcher == Launcher::kSsh) all.push_back({inv.ssh.port, inv.ssh.port});
  if (inv.launcher == Launcher::kSlurm) {
    all.push_back({inv.slurm.slurmctld_port, inv.slurm.slurmctld_port});
    all.push_back({inv.slurm.slurmd_port, inv.slurm.slurmd_port});
    if (inv.slurm.srun_ports) all.push_back(*inv.slurm.srun_ports);
  }
  std::sort(all.begin(), all.end(), [](PortRange a, PortRange b) {
    return a.first < b.first || (a.first == b.first && a.last < b.last);
  });
  std::vector<PortRange> merged;
  for (PortRange r : all) {
    if (!merged.empty() && r.first <= merged.back().last + 1) {
      merged.back().last = std::max(merged.back().last, r.last);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

Result<std::vector<InventoryHost>> bindScenario(const Inventory& inv,
                                                const std::vector<std::string>& scenario_hosts) {
  const std::string file = inv.source.empty() ? "the inventory" : inv.source;
  const std::string launcher = launcherName(inv.launcher);
  std::vector<InventoryHost> out;
  if (inv.launcher == Launcher::kLocal || inv.launcher == Launcher::kNetns) {
    for (const auto& h : scenario_hosts) out.push_back(InventoryHost{h, "", "", ""});
    return out;
  }
  if (scenario_hosts.empty()) {
    return invalid("the scenario places no role on a host, and " + file + " has launcher " +
                   launcher + ", which binds logical hosts (a role's host = \"h1\") to real ones");
  }
  if (inv.launcher == Launcher::kSlurm && inv.slurm.allocation.job_id.empty()) {
    return invalid("launcher slurm of " + file +
                   " runs inside a Slurm allocation, and $SLURM_JOB_ID is not set (for example: "
                   "salloc -N2, then mwchaos run --hosts " +
                   (inv.source.empty() ? std::string("FILE") : inv.source) + " ...)");
  }
  const SlurmAllocation& alloc = inv.slurm.allocation;
  if (inv.launcher == Launcher::kSlurm && inv.hosts.empty()) {
    std::vector<std::string> sorted = scenario_hosts;
    std::sort(sorted.begin(), sorted.end(), naturalLess);
    if (sorted.size() > alloc.nodes.size()) {
      return invalid("the scenario uses " + std::to_string(sorted.size()) + " hosts (" +
                     joined(sorted) + ") and allocation " + alloc.job_id + " has " +
                     std::to_string(alloc.nodes.size()) + " nodes (" + joined(alloc.nodes) +
                     "): " + file + " lists no hosts, so each host takes a node of its own");
    }
    std::map<std::string, std::string> node_of;
    for (size_t i = 0; i < sorted.size(); ++i) node_of[sorted[i]] = alloc.nodes[i];
    for (const auto& h : scenario_hosts) out.push_back(InventoryHost{h, node_of[h], "", ""});
    return out;
  }
  std::vector<std::string> missing, listed;
  for (const auto& h : inv.hosts) listed.push_back(h.name);
  for (const auto& name : scenario_hosts) {
    auto it = std::find_if(inv.hosts.begin(), inv.hosts.end(),
                           [&](const InventoryHost& h) { return h.name == name; });
    if (it == inv.hosts.end()) {
      missing.push_back(name);
      continue;
    }
    if (inv.launcher == Launcher::kSlurm && !alloc.nodes.empty() &&
        std::find(alloc.nodes.begin(), alloc.nodes.end(), it->target) == alloc.nodes.end()) {
      return invalid("host " + name + " of " + file + " is on node " + it->target +
                     ", which is not in allocation " + alloc.job_id + " (" + joined(alloc.nodes) +
                     ")");
    }
    out.push_back(*it);
  }
  if (!missing.empty()) {
    return invalid(std::string("the scenario's host") + (missing.size() > 1 ? "s " : " ") +
                   joined(missing) + (missing.size() > 1 ? " are" : " is") + " not in " + file +
                   " (it binds " + (listed.empty() ? "none" : joined(listed)) + ")");
  }
  return out;
}

namespace {

// One name of a hostlist (brackets included) expanded into `out`. "" on success, else why.
std::string expandName(std::string_view name, std::vector<std::string>* out, size_t* count) {
  std::vector<std::string> partial = {""};
  size_t i = 0;
  while (i < name.size()) {
    if (name[i] == ']') return "a ']' with no '[' before it";
    if (name[i] != '[') {
      const size_t next = name.find_first_of("[]", i);
      std::string_view lit = name.substr(i, next == std::string_view::npos ? name.npos : next - i);
      if (!onlyChars(lit, "_.-")) {
        return "\"" + std::string(lit) + "\" is no host name (letters, digits, _ . -)";
      }
      for (auto& p : partial) p += lit;
      i += lit.size();
      continue;
    }
    const size_t close = name.find(']', i);
    if (close == std::string_view::npos) return "an unclosed '['";
    std::string_view body = name.substr(i + 1, close - i - 1);
    if (body.find('[') != std::string_view::npos) return "a '[' inside a bracket";
    std::vector<std::string> numbers;
    for (size_t p = 0; p <= body.size();) {
      size_t comma = body.find(',', p);
      if (comma == std::string_view::npos) comma = body.size();
      std::string_view item = body.substr(p, comma - p);
      const size_t dash = item.find('-');
      std::string_view lo = item.substr(0, dash);
      std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
      if (!isDigits(lo) || !isDigits(hi) || lo.size() > 9 || hi.size() > 9) {
        return "\"" + std::string(item) + "\" in [" + std::string(body) +
               "] is no number or range like 1-4";
      }
      const long a = std::stol(std::string(lo)), b = std::stol(std::string(hi));
      if (a > b) return "the range " + std::string(item) + " is reversed";
      if (static_cast<size_t>(b - a) >= kMaxHostlistNames) {
        return "more than " + std::to_string(kMaxHostlistNames) + " names";
      }
      for (long n = a; n <= b; ++n) {
        std::string digits = std::to_string(n);
        if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
        numbers.push_back(std::move(digits));
      }
      if (numbers.size() * partial.size() + *count > kMaxHostlistNames) {
        return "more than " + std::to_string(kMaxHostlistNames) + " names";
      }
      p = comma + 1;
    }
    std::vector<std::string> next;
    for (const auto& p : partial) {
      for (const auto& n : numbers) next.push_back(p + n);
    }
    partial = std::move(next);
    i = close + 1;
  }
  *count += partial.size();
  if (*count > kMaxHostlistNames)
    return "more than " + std::to_string(kMaxHostlistNames) + " names";
  out->insert(out->end(), partial.begin(), partial.end());
  return "";
}

}  // namespace

Result<std::vector<std::string>> expandHostlist(std::string_view text) {
  auto fail = [&](const std::string& why) {
    return invalid("hostlist " + quoted(text) + ": " + why);
  };
  if (text.empty()) return fail("empty: no host names");
  std::vector<std::string> out;
  size_t count = 0;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']') depth = std::max(0, depth - 1);
    if (i < text.size() && (text[i] != ',' || depth > 0)) continue;
    std::string_view name = text.substr(start, i - start);
    if (name.empty()) return fail("an empty name at position " + std::to_string(start + 1));
    if (std::string why = expandName(name, &out, &count); !why.empty()) return fail(why);
    start = i + 1;
  }
  return out;
}

}  // namespace mw::harness
