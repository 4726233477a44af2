#include "chaos/host_rules.h"

#include <unistd.h>

#include <cstdio>

#include "chaos/process.h"

namespace mw::chaos {

using namespace std::chrono_literals;

HostRules::HostRules(std::vector<std::pair<int, int>> exempt, std::string default_dev)
    : exempt_(std::move(exempt)),
      default_dev_(std::move(default_dev)),
      in_chain_("MWCHAOS-IN-" + std::to_string(::getpid())),
      out_chain_("MWCHAOS-OUT-" + std::to_string(::getpid())) {}

HostRules::~HostRules() { remove().ignore(); }

Status HostRules::addExempt() {
  for (const auto& [first, last] : exempt_) {
    const std::string ports =
        first == last ? std::to_string(first) : std::to_string(first) + ":" + std::to_string(last);
    for (const auto& chain : {in_chain_, out_chain_}) {
      for (const char* dir : {"--dport", "--sport"}) {
        MW_RETURN_IF_ERROR(
            runProgram({"iptables", "-w", "-A", chain, "-p", "tcp", dir, ports, "-j", "RETURN"}));
      }
    }
  }
  return Status::Ok();
}

Status HostRules::ensureChains() {
  if (chains_) return Status::Ok();
  // Set first: remove() then undoes whatever part of this was made, should a step fail.
  chains_ = true;
  for (const auto& [chain, hook] :
       {std::pair{in_chain_, "INPUT"}, std::pair{out_chain_, "OUTPUT"}}) {
    // A chain left by an agent of the same pid that died: flushed and used again.
    if (!runProgram({"iptables", "-w", "-N", chain}).ok()) {
      MW_RETURN_IF_ERROR(runProgram({"iptables", "-w", "-F", chain}));
    }
    MW_RETURN_IF_ERROR(runProgram({"iptables", "-w", "-I", hook, "1", "-j", chain}));
  }
  return addExempt();
}

Status HostRules::cut(const std::vector<std::string>& peers, bool loud) {
  MW_RETURN_IF_ERROR(ensureChains());
  for (const auto& to : peers) {
    if (loud) {
      MW_RETURN_IF_ERROR(runProgram({"iptables", "-w", "-A", out_chain_, "-d", to, "-p", "tcp",
                                     "-j", "REJECT", "--reject-with", "tcp-reset"}));
      ++rules_;
      MW_RETURN_IF_ERROR(
          runProgram({"iptables", "-w", "-A", out_chain_, "-d", to, "-j", "REJECT"}));
    } else {
      MW_RETURN_IF_ERROR(runProgram({"iptables", "-w", "-A", out_chain_, "-d", to, "-j", "DROP"}));
    }
    ++rules_;
  }
  return Status::Ok();
}

Status HostRules::loss(double p) {
  MW_RETURN_IF_ERROR(ensureChains());
  char prob[32];
  std::snprintf(prob, sizeof(prob), "%.4f", p);
  MW_RETURN_IF_ERROR(
      runProgram({"iptables", "-w", "-A", in_chain_, "!", "-i", "lo", "-m", "statistic", "--mode",
                  "random", "--probability", prob, "-j", "DROP"}));
  ++rules_;
  MW_RETURN_IF_ERROR(
      runProgram({"iptables", "-w", "-A", out_chain_, "!", "-o", "lo", "-m", "statistic", "--mode",
                  "random", "--probability", prob, "-j", "DROP"}));
  ++rules_;
  return Status::Ok();
}

namespace {

// The kind of `dev`'s root qdisc ("noqueue", "htb"), from `tc qdisc show dev DEV root`.
Result<std::string> rootQdisc(const std::string& dev) {
  std::string out;
  MW_RETURN_IF_ERROR(runProgram({"tc", "qdisc", "show", "dev", dev, "root"}, 10s, &out));
  // "qdisc noqueue 0: root refcnt 2" (or, with no root line, the kernel's default: nothing).
  const size_t at = out.find("qdisc ");
  if (at == std::string::npos) return std::string();
  const size_t from = at + 6, end = out.find(' ', from);
  return out.substr(from, end == std::string::npos ? std::string::npos : end - from);
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

}  // namespace

Status HostRules::checkShapeable(const std::string& d) const {
  if (shaped_.count(d) != 0) return Status::Ok();  // ours already: replaced again, deleted at heal
  auto kind = rootQdisc(d);
  if (!kind.ok()) return kind.status();
  if (kernelDefault(*kind)) return Status::Ok();
  return Status(Code::kUnavailable,
                "device " + d + " has a root qdisc of its own (" + *kind +
                    "): bandwidth and delay faults replace the root qdisc and could not put it "
                    "back, so they are refused there (name another device, hosts.NAME.dev, or "
                    "remove that qdisc)");
}

Status HostRules::bandwidth(const std::string& d, const std::string& rate) {
  MW_RETURN_IF_ERROR(checkShapeable(dev(d)));
  MW_RETURN_IF_ERROR(runProgram({"tc", "qdisc", "replace", "dev", dev(d), "root", "tbf", "rate",
                                 rate, "burst", "64kb", "latency", "400ms"}));
  shaped_.insert(dev(d));
  return Status::Ok();
}

Status HostRules::delay(const std::string& d, int ms, int jitter_ms) {
  MW_RETURN_IF_ERROR(checkShapeable(dev(d)));
  Status s = runProgram({"tc", "qdisc", "replace", "dev", dev(d), "root", "netem", "delay",
                         std::to_string(ms) + "ms", std::to_string(jitter_ms) + "ms"});
  if (!s.ok() && (s.message().find("netem") != std::string::npos ||
                  s.message().find("qdisc kind is unknown") != std::string::npos)) {
    return Status(
        Code::kUnavailable,
        "this kernel has no netem qdisc (sch_netem), so delay cannot be simulated: " + s.message());
  }
  MW_RETURN_IF_ERROR(s);
  shaped_.insert(dev(d));
  return Status::Ok();
}

Status HostRules::heal() {
  Status first;
  auto keep = [&first](Status s) {
    if (first.ok() && !s.ok()) first = s;
  };
  if (chains_ && rules_ > 0) {
    for (const auto& chain : {in_chain_, out_chain_})
      keep(runProgram({"iptables", "-w", "-F", chain}));
    rules_ = 0;
    keep(addExempt());
  }
  for (const auto& d : shaped_) keep(runProgram({"tc", "qdisc", "del", "dev", d, "root"}));
  shaped_.clear();
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
    chains_ = false;
  }
  return first;
}

}  // namespace mw::chaos
