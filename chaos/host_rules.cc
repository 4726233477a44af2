#include "chaos/host_rules.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "chaos/process.h"

namespace mw::chaos {

using namespace std::chrono_literals;

namespace {

// The root qdisc of `dev`: its kind ("noqueue", "htb") and handle ("4d57:"), from `tc qdisc show
// dev DEV root` ("qdisc tbf 4d57: root refcnt 2 rate ..."). Both empty when it has none listed
// (the kernel's default).
Status rootQdisc(const std::string& dev, std::string* kind, std::string* handle) {
  std::string out;
  MW_RETURN_IF_ERROR(runProgram({"tc", "qdisc", "show", "dev", dev, "root"}, 10s, &out));
  kind->clear();
  handle->clear();
  const size_t at = out.find("qdisc ");
  if (at == std::string::npos) return Status::Ok();
  std::istringstream words(out.substr(at + 6));
  words >> *kind >> *handle;
  return Status::Ok();
}

// Whether `kind` is what the kernel gives a device nobody configured: a heal (tc qdisc del root)
// puts it back as it was.
bool kernelDefault(const std::string& kind) {
  if (kind.empty() || kind == "noqueue" || kind == "pfifo_fast" || kind == "mq") return true;
  char configured[64] = {};
  if (FILE* f = std::fopen("/proc/sys/net/core/default_qdisc", "r")) {
    if (std::fgets(configured, sizeof configured, f) == nullptr) configured[0] = '\0';
    std::fclose(f);
  }
  std::string d = configured;
  while (!d.empty() && (d.back() == '\n' || d.back() == ' ')) d.pop_back();
  return kind == d || kind == "fq_codel";
}

std::string joined(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ",") + x;
  return out;
}

}  // namespace

unsigned long long processStartTime(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  // pid (comm) state ... : comm may hold spaces and parentheses, so count from the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  // Fields 3.. follow; the start time is field 22, the 20th of these.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

HostRules::HostRules(std::vector<std::pair<int, int>> exempt, std::string default_dev,
                     std::string control_peer)
    : exempt_(std::move(exempt)),
      default_dev_(std::move(default_dev)),
      control_peer_(std::move(control_peer)),
      in_chain_("MWCHAOS-IN-" + std::to_string(::getpid())),
      out_chain_("MWCHAOS-OUT-" + std::to_string(::getpid())),
      owner_("pid=" + std::to_string(::getpid()) +
             " start=" + std::to_string(processStartTime(::getpid()))) {}

HostRules::~HostRules() { remove().ignore(); }

std::vector<std::vector<std::string>> HostRules::exemptRules() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& [first, last] : exempt_) {
    const std::string ports =
        first == last ? std::to_string(first) : std::to_string(first) + ":" + std::to_string(last);
    // A range (srun's) may hold the ephemeral port of a data-plane connection: exempt with the
    // controller alone, where this host knows it.
    const bool scoped = first != last && !control_peer_.empty();
    for (const auto& chain : {in_chain_, out_chain_}) {
      for (const char* dir : {"--dport", "--sport"}) {
        std::vector<std::string> rule = {"-A", chain, "-p", "tcp"};
        if (scoped) rule.insert(rule.end(), {chain == in_chain_ ? "-s" : "-d", control_peer_});
        rule.insert(rule.end(), {dir, ports, "-j", "RETURN"});
        out.push_back(std::move(rule));
      }
    }
  }
  return out;
}

std::string HostRules::ownerRecord() const {
  return "mwchaos-owner " + owner_ + " devs=" + joined(recorded_);
}

std::string HostRules::restoreLine(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    out += out.empty() ? "" : " ";
    if (!a.empty() && a.find_first_of(" \t\"\\'") == std::string::npos) {
      out += a;
      continue;
    }
    out += '"';  // iptables-restore reads \" and \\ inside quotes as the character itself
    for (char c : a) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out;
}

Status HostRules::restore(const std::vector<std::string>& lines) {
  std::string batch = "*filter\n";
  for (const auto& l : lines) {
    // A line break inside a word would end the line there: refused, nothing written.
    if (l.find_first_of(std::string_view("\n\r\0", 3)) != std::string::npos) {
      return Status(Code::kInvalidArgument,
                    "an iptables rule's word holds a line break or a NUL byte: " + l);
    }
    batch += l + "\n";
  }
  batch += "COMMIT\n";
  return runProgram({"iptables-restore", "-w", "--noflush"}, 10s, nullptr, batch);
}

Status HostRules::writeOwner() {
  std::vector<std::string> lines;
  for (const auto& chain : {in_chain_, out_chain_}) {
    lines.push_back(restoreLine({"-R", chain, "1", "-m", "comment", "--comment", ownerRecord()}));
  }
  return restore(lines);
}

Status HostRules::ready() {
  if (chains_) return Status::Ok();
  // One transaction: the chains with their owner record first and their exempt rules, and the
  // jumps to them, all or nothing (an agent killed while it runs leaves no chain without its
  // record). A chain left by an agent of the same pid that died is emptied and used again
  // (declaring a chain that exists flushes it).
  std::vector<std::string> lines;
  for (const auto& chain : {in_chain_, out_chain_}) lines.push_back(":" + chain + " - [0:0]");
  for (const auto& chain : {in_chain_, out_chain_}) {
    lines.push_back(restoreLine({"-A", chain, "-m", "comment", "--comment", ownerRecord()}));
  }
  for (const auto& rule : exemptRules()) lines.push_back(restoreLine(rule));
  lines.push_back(restoreLine({"-I", "INPUT", "1", "-j", in_chain_}));
  lines.push_back(restoreLine({"-I", "OUTPUT", "1", "-j", out_chain_}));
  Status s = restore(lines);
  // Failed, or killed at its limit after the kernel took it: whether the chains are there.
  chains_ = s.ok() || runProgram({"iptables", "-w", "-S", in_chain_}).ok();
  return s;
}

Status HostRules::cut(const std::vector<std::string>& peers, bool loud) {
  MW_RETURN_IF_ERROR(ready());
  // One transaction: every peer is cut in the same instant, or none is. Each rule goes after the
  // one before it (slot + k), so that a loud cut's TCP reset comes ahead of its other REJECT.
  std::vector<std::string> lines;
  auto add = [&](std::vector<std::string> match, std::vector<std::string> target) {
    std::vector<std::string> rule = {"-I", out_chain_, faultSlot(static_cast<int>(lines.size()))};
    rule.insert(rule.end(), match.begin(), match.end());
    rule.insert(rule.end(), target.begin(), target.end());
    lines.push_back(restoreLine(rule));
  };
  for (const auto& to : peers) {
    if (loud) {
      add({"-d", to, "-p", "tcp"}, {"-j", "REJECT", "--reject-with", "tcp-reset"});
      add({"-d", to}, {"-j", "REJECT"});
    } else {
      add({"-d", to}, {"-j", "DROP"});
    }
  }
  if (lines.empty()) return Status::Ok();
  MW_RETURN_IF_ERROR(restore(lines));
  rules_ += static_cast<int>(lines.size());
  return Status::Ok();
}

Status HostRules::loss(double p) {
  MW_RETURN_IF_ERROR(ready());
  char prob[32];
  std::snprintf(prob, sizeof(prob), "%.4f", p);
  MW_RETURN_IF_ERROR(restore({
      restoreLine({"-I", in_chain_, faultSlot(), "!", "-i", "lo", "-m", "statistic", "--mode",
                   "random", "--probability", prob, "-j", "DROP"}),
      restoreLine({"-I", out_chain_, faultSlot(), "!", "-o", "lo", "-m", "statistic", "--mode",
                   "random", "--probability", prob, "-j", "DROP"}),
  }));
  rules_ += 2;
  return Status::Ok();
}

Status HostRules::checkShapeable(const std::string& d) const {
  if (d.empty()) {
    return Status(Code::kInvalidArgument,
                  "no interface to shape: the fault names none, the agent was given none (--dev), "
                  "and no route to the peers was found; name it with hosts.NAME.dev");
  }
  if (shaped_.count(d) != 0) return Status::Ok();  // ours already: replaced again, deleted at heal
  std::string kind, handle;
  MW_RETURN_IF_ERROR(rootQdisc(d, &kind, &handle));
  if (kernelDefault(kind)) return Status::Ok();
  return Status(Code::kUnavailable,
                "device " + d + " has a root qdisc of its own (" + kind +
                    "): bandwidth and delay faults replace the root qdisc and could not put it "
                    "back, so they are refused there (name another device, hosts.NAME.dev, or "
                    "remove that qdisc)");
}

Status HostRules::bandwidth(const std::string& d, const std::string& rate) {
  MW_RETURN_IF_ERROR(checkShapeable(dev(d)));
  // Owned before it exists: an agent that dies between the two leaves no qdisc without a record.
  MW_RETURN_IF_ERROR(record(dev(d)));
  const bool had = shaped_.count(dev(d)) != 0;
  shaped_.insert(dev(d));
  Status s = runProgram({"tc", "qdisc", "replace", "dev", dev(d), "root", "handle", kQdiscHandle,
                         "tbf", "rate", rate, "burst", "64kb", "latency", "400ms"});
  if (!s.ok() && !had) shaped_.erase(dev(d));  // nothing of ours is on it (still recorded)
  return s;
}

Status HostRules::record(const std::string& d) {
  MW_RETURN_IF_ERROR(ready());
  if (recorded_.count(d) != 0) return Status::Ok();
  recorded_.insert(d);
  return writeOwner();
}

Status HostRules::delay(const std::string& d, int ms, int jitter_ms) {
  MW_RETURN_IF_ERROR(checkShapeable(dev(d)));
  MW_RETURN_IF_ERROR(record(dev(d)));
  const bool had = shaped_.count(dev(d)) != 0;
  shaped_.insert(dev(d));
  Status s =
      runProgram({"tc", "qdisc", "replace", "dev", dev(d), "root", "handle", kQdiscHandle, "netem",
                  "delay", std::to_string(ms) + "ms", std::to_string(jitter_ms) + "ms"});
  if (!s.ok() && !had) shaped_.erase(dev(d));  // nothing of ours is on it (still recorded)
  if (!s.ok() && (s.message().find("netem") != std::string::npos ||
                  s.message().find("qdisc kind is unknown") != std::string::npos)) {
    return Status(
        Code::kUnavailable,
        "this kernel has no netem qdisc (sch_netem), so delay cannot be simulated: " + s.message());
  }
  return s;
}

Status HostRules::prepare(const std::string& d, bool delay_too) {
  MW_RETURN_IF_ERROR(ready());  // whatever `dev` answers: a cut or loss later needs only its rules
  MW_RETURN_IF_ERROR(checkShapeable(dev(d)));
  MW_RETURN_IF_ERROR(record(dev(d)));
  if (!delay_too || shaped_.count(dev(d)) != 0) return Status::Ok();  // shaped: left as it is
  MW_RETURN_IF_ERROR(delay(d, 0, 0));
  // Taken off again; failing that, it stays in shaped_ for heal() to remove.
  MW_RETURN_IF_ERROR(runProgram({"tc", "qdisc", "del", "dev", dev(d), "root"}));
  shaped_.erase(dev(d));
  return Status::Ok();
}

Status HostRules::heal() {
  Status first;
  unhealed_.clear();
  auto keep = [&first](Status s) {
    if (first.ok() && !s.ok()) first = s;
    return s.ok();
  };
  if (chains_ && rules_ > 0) {
    // The fault rules are put out of force, not deleted: a RETURN (comment "mwchaos-healed") goes
    // into each chain's fault slot, ahead of them, both in one transaction. Deleting or replacing
    // a rule is what waits on the kernel: a heal that flushed the chains took 1.7 s beside busy
    // CPUs, and a 300 ms partition lasted 2 s (docs/testing.md, Hunt 23); adding one takes
    // milliseconds. Later faults go into the slot ahead of it, and the rules behind it, which no
    // packet reaches, go with the chains (remove()).
    std::vector<std::string> lines;
    for (const auto& chain : {in_chain_, out_chain_}) {
      lines.push_back(restoreLine({"-I", chain, faultSlot(), "-m", "comment", "--comment",
                                   "mwchaos-healed", "-j", "RETURN"}));
    }
    if (keep(restore(lines))) {
      rules_ = 0;
    } else {  // nothing of it was done: counted still, the next heal() tries again
      for (const auto& chain : {in_chain_, out_chain_}) unhealed_.push_back("rules in " + chain);
    }
  }
  std::set<std::string> left;
  for (const auto& d : shaped_) {
    if (!keep(runProgram({"tc", "qdisc", "del", "dev", d, "root"}))) {
      std::string kind, handle;
      // Gone already (the device went, or someone removed it): nothing of ours is left there.
      if (rootQdisc(d, &kind, &handle).ok() && handle != kQdiscHandle) continue;
      left.insert(d);
      unhealed_.push_back("qdisc on " + d);
    }
  }
  // The record keeps listing them (recorded_): a device listed without a qdisc of ours costs
  // the sweep nothing, and rewriting the record is a rule replaced, which under load took seconds.
  shaped_ = std::move(left);
  return first;
}

Status HostRules::remove() {
  Status first = heal();
  auto keep = [&first](Status s) {
    if (first.ok() && !s.ok()) first = s;
  };
  if (chains_) {
    for (const auto& [chain, hook] :
         {std::pair{in_chain_, "INPUT"}, std::pair{out_chain_, "OUTPUT"}}) {
      keep(runProgram({"iptables", "-w", "-D", hook, "-j", chain}));
      keep(runProgram({"iptables", "-w", "-F", chain}));
      keep(runProgram({"iptables", "-w", "-X", chain}));
    }
    // A qdisc left by heal() keeps the chains' record until it goes (sweepDeadAgents then).
    chains_ = !shaped_.empty();
    if (!chains_) recorded_.clear();  // the record went with the chains
  }
  return first;
}

namespace {

struct Owner {
  int pid = 0;
  bool record = false;           // an owner record was found
  unsigned long long start = 0;  // as recorded
  std::set<std::string> devs;    // as recorded
  std::set<std::string> chains;  // its chains
};

// Whether `pid` runs an mwchaos agent (its command line says "mwchaos" and "agent").
bool runsAgent(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
  std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return cmd.find("mwchaos") != std::string::npos && cmd.find("agent") != std::string::npos;
}

// The value of `key=` in `text` ("pid=12 start=34 devs=a,b"), "" when absent.
std::string field(const std::string& text, const std::string& key) {
  const size_t at = text.find(key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 1;
  const size_t end = text.find_first_of(" \"", from);
  return text.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

// The network devices of this namespace (`ip -o link show`: "2: eth0@if3: <...>").
std::vector<std::string> devices() {
  std::vector<std::string> out;
  std::string text;
  if (!runProgram({"ip", "-o", "link", "show"}, 10s, &text).ok()) return out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find(": ");
    if (a == std::string::npos) continue;
    const size_t b = line.find_first_of(":@", a + 2);
    if (b != std::string::npos) out.push_back(line.substr(a + 2, b - a - 2));
  }
  return out;
}

}  // namespace

Result<SweepResult> sweepDeadAgents() {
  if (::geteuid() != 0) return Status(Code::kUnavailable, "not root: no agent made rules here");
  std::string text;
  MW_RETURN_IF_ERROR(runProgram({"iptables", "-w", "-S"}, 10s, &text));
  std::map<int, Owner> owners;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    // "-N MWCHAOS-IN-123", or a rule of it: "-A MWCHAOS-IN-123 -m comment --comment ...".
    for (const char* prefix :
         {"-N MWCHAOS-IN-", "-N MWCHAOS-OUT-", "-A MWCHAOS-IN-", "-A MWCHAOS-OUT-"}) {
      const std::string p = prefix;
      if (line.rfind(p, 0) != 0) continue;
      const size_t end = line.find(' ', p.size());
      const std::string digits =
          line.substr(p.size(), end == std::string::npos ? end : end - p.size());
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) break;
      Owner& o = owners[std::stoi(digits)];
      o.pid = std::stoi(digits);
      const std::string chain = line.substr(3, end == std::string::npos ? end : end - 3);
      o.chains.insert(chain);
      if (line.find("mwchaos-owner") != std::string::npos) {
        o.record = true;
        o.start = std::strtoull(field(line, "start").c_str(), nullptr, 10);
        std::istringstream devs(field(line, "devs"));
        for (std::string d; std::getline(devs, d, ',');) {
          if (!d.empty()) o.devs.insert(d);
        }
      }
      break;
    }
  }
  SweepResult r;
  std::set<std::string> live_devs, swept_devs;
  for (auto& [pid, o] : owners) {
    bool alive = pid == ::getpid();
    if (!alive && ::kill(pid, 0) == 0) {
      alive = o.record ? processStartTime(pid) == o.start : runsAgent(pid);
    }
    if (alive) {
      live_devs.insert(o.devs.begin(), o.devs.end());
      continue;
    }
    r.owners.push_back("pid " + std::to_string(pid));
    for (const auto& chain : o.chains) {
      const char* hook = chain.rfind("MWCHAOS-IN-", 0) == 0 ? "INPUT" : "OUTPUT";
      for (int i = 0; i < 16 && runProgram({"iptables", "-w", "-D", hook, "-j", chain}).ok(); ++i) {
      }
      Status s = runProgram({"iptables", "-w", "-F", chain});
      if (s.ok()) s = runProgram({"iptables", "-w", "-X", chain});
      if (s.ok()) {
        ++r.chains;
      } else {
        r.failed.push_back(chain + ": " + s.message());
      }
    }
    swept_devs.insert(o.devs.begin(), o.devs.end());
  }
  // Ours by handle, and no live owner lists it: what a dead agent left (or one that died before
  // its record said so).
  for (const auto& d : devices()) {
    if (live_devs.count(d) != 0) continue;
    std::string kind, handle;
    if (!rootQdisc(d, &kind, &handle).ok() || handle != kQdiscHandle) continue;
    if (Status s = runProgram({"tc", "qdisc", "del", "dev", d, "root"}); s.ok()) {
      ++r.qdiscs;
    } else {
      r.failed.push_back("qdisc on " + d + ": " + s.message());
    }
  }
  return r;
}

}  // namespace mw::chaos
