// mw_host_agent_bench: what a host agent costs (docs/benchmarks.md, "Host agents").
//
//   delivery: the round trip of one fault request (a SIGCONT to a sleeping role: delivered, and
//             ending nothing) through a held agent pipe, against the round trip of one line
//             through `cat` started the same way (the pipe, ssh or srun itself): median, p90,
//             p99 and max in microseconds, and the ratio of the medians.
//   idle:     the agent's CPU while it holds a role and is only kept alive (pings every lease/4),
//             in percent of one core.
//   --sweep R: instead of the two above, R rounds of: an agent started on a clean host (the
//             baseline: start to hello answered), given a partition from --peer, 10% loss and a
//             bandwidth cap (on the interface its route to --peer takes), then SIGKILLed; the next
//             agent started there removes what it left before it answers hello. Timed: the
//             SIGKILL to that hello (the host clean again), against the baseline start; checked:
//             the second agent says what it swept, and no chain and no 4d57: qdisc is left. Needs
//             root, iptables and tc where the agent runs (bench/agent_sweep.sh makes a namespace).
//
// usage: mw_host_agent_bench --agent PATH [--via "ssh -F cfg h1"] [--n N] [--idle-s S]
//                            [--sweep R --peer ADDRESS]
// --via: the launcher command the agent (and the `cat` baseline) is started through; none runs
// them directly on this machine. The agent must run on this machine's kernel (a local namespace or
// an sshd in one) for the idle CPU, which is read from /proc.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/client.h"
#include "chaos/process.h"

using namespace mw;
using namespace std::chrono_literals;

namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Stats {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

Stats stats(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))];
  };
  return {at(0.5), at(0.9), at(0.99), us.back()};
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Ticks of CPU (user + system) process `pid` has used.
long cpuTicks(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(f)), {});
  const size_t close = all.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "mw_host_agent_bench: %s\n", why.c_str());
  std::exit(1);
}

// Round trips of one line through `cat` started by `via`.
std::vector<double> catRoundTrips(const std::vector<std::string>& via, int n) {
  std::vector<std::string> argv = via;
  argv.push_back("/bin/cat");
  if (argv[0].find('/') == std::string::npos) argv[0] = "/usr/bin/" + argv[0];
  auto p = chaos::Process::spawn(argv);
  if (!p.ok()) die("starting cat: " + p.status().message());
  const std::string line(120, 'x');  // about a request frame's size
  std::vector<double> us;
  std::string got;
  for (int i = 0; i < n + 20; ++i) {
    const int64_t t0 = nowNs();
    const std::string out = line + "\n";
    if (::write((*p)->stdinFd(), out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
      die("writing to cat");
    }
    got.clear();
    while (got.find('\n') == std::string::npos) {
      pollfd pf{(*p)->stdoutFd(), POLLIN, 0};
      if (::poll(&pf, 1, 5000) <= 0) die("cat did not answer in 5 s");
      if (!(*p)->readStdout(&got) && got.empty()) die("cat closed its output");
    }
    if (i >= 20) us.push_back(static_cast<double>(nowNs() - t0) / 1e3);  // 20 warm-up trips
  }
  (*p)->killAndReap();
  return us;
}

double msSince(int64_t t0) { return static_cast<double>(nowNs() - t0) / 1e6; }

// What `via` + `words` prints (the host's firewall or qdiscs), "" when it fails.
std::string outputOf(const std::vector<std::string>& via, const std::vector<std::string>& words) {
  std::vector<std::string> argv = via;
  argv.insert(argv.end(), words.begin(), words.end());
  std::string cmd;
  for (const auto& w : argv) cmd += (cmd.empty() ? "" : " ") + w;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

void printSpread(const char* what, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  std::printf("%s: median %.1f ms, min %.1f ms, max %.1f ms (%zu rounds)\n", what,
              ms[ms.size() / 2], ms.front(), ms.back(), ms.size());
}

// --sweep: the time from an agent's death, with faults in force, to a clean host.
int sweepRounds(const agent::LaunchSpec& spec, const std::vector<std::string>& via,
                const std::string& peer, int rounds) {
  std::vector<double> clean_ms, dirty_ms;
  for (int r = 0; r < rounds; ++r) {
    int64_t t0 = nowNs();
    auto first = agent::Connection::start(spec, 30s);
    if (!first.ok()) die("starting an agent: " + first.status().message());
    clean_ms.push_back(msSince(t0));
    if ((*first)->hello().facts.count("root") == 0 || (*first)->hello().facts.at("root") != "yes") {
      die("the agent is not root: network faults (and this benchmark) need it");
    }
    agent::Net cut, loss, cap;
    cut.op = "cut";
    cut.peers = {peer};
    loss.op = "loss";
    loss.p = 0.1;
    cap.op = "bandwidth";
    cap.rate = "10mbit";
    cap.peers = {peer};
    for (const agent::Net& m : {cut, loss, cap}) {
      auto done = (*first)->call(m);
      if (!done.ok()) die("fault " + m.op + ": " + done.status().message());
    }
    const pid_t pid = static_cast<pid_t>((*first)->hello().pid);
    if (::kill(pid, SIGKILL) != 0) die("SIGKILL of the agent (pid " + std::to_string(pid) + ")");
    t0 = nowNs();
    first->reset();  // reaps the launcher: the agent died without a word
    auto next = agent::Connection::start(spec, 30s);
    if (!next.ok()) die("starting the next agent: " + next.status().message());
    dirty_ms.push_back(msSince(t0));
    const auto& facts = (*next)->hello().facts;
    const auto swept = facts.find("swept");
    if (swept == facts.end() || swept->second.find("removed 2 chain(s) and 1 qdisc(s)") != 0) {
      die("round " + std::to_string(r) +
          ": the next agent did not say it removed 2 chains and 1 "
          "qdisc: '" +
          (swept == facts.end() ? std::string() : swept->second) + "'");
    }
    const std::string rules = outputOf(via, {"iptables", "-w", "-S"});
    const std::string qdiscs = outputOf(via, {"tc", "qdisc", "show"});
    if (rules.find("MWCHAOS") != std::string::npos || qdiscs.find("4d57:") != std::string::npos) {
      die("round " + std::to_string(r) + ": left after the sweep:\n" + rules + qdiscs);
    }
    if (Status bye = (*next)->bye(); !bye.ok()) die("bye: " + bye.message());
  }
  std::printf("launcher %s, %d rounds of: faults in force, SIGKILL, the next agent\n",
              spec.launcher.c_str(), rounds);
  printSpread("agent start on a clean host (baseline)", clean_ms);
  printSpread("agent SIGKILLed -> next agent answered, host clean", dirty_ms);
  std::vector<double> a = clean_ms, b = dirty_ms;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::printf("ratio of medians (death to clean / clean start): %.2f\n",
              b[b.size() / 2] / a[a.size() / 2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string agent_path, via_text, peer;
  int n = 2000, sweep = 0;
  double idle_s = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--agent") {
      agent_path = value();
    } else if (a == "--via") {
      via_text = value();
    } else if (a == "--n") {
      n = std::atoi(value().c_str());
    } else if (a == "--idle-s") {
      idle_s = std::atof(value().c_str());
    } else if (a == "--sweep") {
      sweep = std::atoi(value().c_str());
      if (sweep < 1) die("--sweep wants a number of rounds, 1 or more");
    } else if (a == "--peer") {
      peer = value();
    } else {
      die("unknown option '" + a +
          "' (--agent PATH [--via CMD] [--n N] [--idle-s S] [--sweep R --peer ADDRESS])");
    }
  }
  if (agent_path.empty()) die("--agent PATH (the mwchaos program) is required");
  if (sweep > 0 && peer.empty()) die("--sweep needs --peer ADDRESS (the address a partition cuts)");
  if (n < 100) die("--n must be at least 100");
  const std::vector<std::string> via = words(via_text);

  agent::LaunchSpec spec;
  spec.host = via.empty() ? "local" : via.back();
  spec.launcher = via.empty() ? "local" : via.front();
  spec.argv = via;
  spec.argv.insert(spec.argv.end(), {agent_path, "agent", "--stdio"});
  if (sweep > 0) return sweepRounds(spec, via, peer, sweep);
  auto c = agent::Connection::start(spec, 30s);
  if (!c.ok()) die(c.status().message());
  agent::Spawn s;
  s.role = "sleeper";
  s.argv = {"/bin/sleep", "1000"};
  auto role = (*c)->spawn(s);
  if (!role.ok()) die("spawning a role: " + role.status().message());

  // Delivery, alternating blocks of agent requests and cat round trips (so that both see the
  // same machine), 10 blocks each.
  std::vector<double> agent_us, cat_us;
  const int block = n / 10;
  for (int b = 0; b < 10; ++b) {
    for (int i = 0; i < block; ++i) {
      const int64_t t0 = nowNs();
      auto r = (*c)->call(agent::Signal{"sleeper", SIGCONT});
      if (!r.ok()) die("signal: " + r.status().message());
      agent_us.push_back(static_cast<double>(nowNs() - t0) / 1e3);
    }
    const auto more = catRoundTrips(via, block);
    cat_us.insert(cat_us.end(), more.begin(), more.end());
  }
  const Stats a = stats(agent_us), k = stats(cat_us);
  std::printf("launcher %s, %d requests\n", spec.launcher.c_str(), n);
  std::printf("delivery  agent: p50 %.0f us, p90 %.0f us, p99 %.0f us, max %.0f us\n", a.p50, a.p90,
              a.p99, a.max);
  std::printf("baseline  cat:   p50 %.0f us, p90 %.0f us, p99 %.0f us, max %.0f us\n", k.p50, k.p90,
              k.p99, k.max);
  std::printf("ratio of medians (agent / cat): %.2f\n", a.p50 / k.p50);
  std::printf(
      "clock: offset %.3f ms, uncertainty %.3f ms, best round trip %.3f ms, same clock %s\n",
      static_cast<double>((*c)->clock().offset_ns) / 1e6,
      static_cast<double>((*c)->clock().uncertainty_ns) / 1e6,
      static_cast<double>((*c)->clock().rtt_ns) / 1e6, (*c)->sameClock() ? "yes" : "no");

  // Idle: the agent holds its role; only the keep-alive pings arrive.
  const long pid = (*c)->hello().pid;
  const long t0 = cpuTicks(pid);
  if (t0 < 0) {
    std::printf("idle: the agent (pid %ld) is not on this machine's /proc: not measured\n", pid);
  } else {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(idle_s)) {
      (*c)->pump();
      std::this_thread::sleep_for(50ms);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu =
        static_cast<double>(cpuTicks(pid) - t0) / static_cast<double>(sysconf(_SC_CLK_TCK));
    std::printf("idle agent: %.3f%% of a core over %.1f s\n", 100 * cpu / secs, secs);
  }
  role->reset();
  (*c)->bye().ignore();
  return 0;
}
