#include "chaos/netsim.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "chaos/process.h"

namespace mw::chaos {

namespace {

constexpr auto kCommandLimit = std::chrono::seconds(10);

// The program's path in the system directories, or "" when it is not installed.
std::string which(const char* prog) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    std::string p = std::string(dir) + "/" + prog;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

Status SimNet::available() {
  if (::geteuid() != 0) {
    return Status(Code::kUnavailable,
                  "simulated hosts and network faults need root (network namespaces, iptables "
                  "and tc); run mwchaos as root");
  }
  for (const char* prog : {"ip", "iptables", "tc", "nsenter"}) {
    if (which(prog).empty()) {
      return Status(Code::kUnavailable, std::string("network faults need the '") + prog +
                                            "' program (apt-get install iproute2 iptables "
                                            "util-linux)");
    }
  }
  auto h = hold();
  if (!h.ok()) return h.status();
  ::kill(h->pid, SIGKILL);
  ::waitpid(h->pid, nullptr, 0);
  return Status::Ok();
}

Result<SimNet::Holder> SimNet::hold() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return Status(Code::kIoError, std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status(Code::kIoError, std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    char ok = ::unshare(CLONE_NEWNET) == 0 ? 1 : static_cast<char>(errno == EPERM ? 2 : 3);
    ssize_t w = ::write(fds[1], &ok, 1);
    (void)w;
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char got = 0;
  ssize_t n = ::read(fds[0], &got, 1);
  ::close(fds[0]);
  if (n != 1 || got != 1) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return Status(Code::kUnavailable,
                  got == 2 ? "creating a network namespace was refused (unshare: EPERM): run as "
                             "root with CAP_SYS_ADMIN"
                           : "this kernel cannot create network namespaces (unshare failed)");
  }
  return Holder{pid};
}

Status SimNet::in(const Holder& h, const std::vector<std::string>& argv) const {
  // available() checked that every program is installed.
  std::vector<std::string> cmd = {which("nsenter"), "-t", std::to_string(h.pid), "-n",
                                  which(argv.at(0).c_str())};
  cmd.insert(cmd.end(), argv.begin() + 1, argv.end());
  std::string text;
  for (const auto& a : argv) text += (text.empty() ? "" : " ") + a;
  auto p = Process::spawn(cmd);
  if (!p.ok()) return p.status();
  std::string err, out;
  const auto until = deadlineIn(kCommandLimit);
  while (!(*p)->poll() && Clock::now() < until) {
    (*p)->readStderr(&err);
    (*p)->readStdout(&out);
    ::usleep(1000);
  }
  if (!(*p)->poll()) {
    (*p)->killAndReap();
    return Status(Code::kTimeout, "'" + text + "' did not finish in 10 s");
  }
  (*p)->readStderr(&err);
  if ((*p)->exitCode() != 0) {
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return Status(Code::kIoError, "'" + text + "' failed (" + (*p)->exitText() + "): " + err);
  }
  return Status::Ok();
}

Result<std::unique_ptr<SimNet>> SimNet::create(const std::vector<std::string>& hosts) {
  MW_RETURN_IF_ERROR(available());
  if (hosts.size() > 250) return Status(Code::kInvalidArgument, "at most 250 simulated hosts");
  std::unique_ptr<SimNet> net(new SimNet());
  auto sw = hold();
  if (!sw.ok()) return sw.status();
  net->switch_ = *sw;
  MW_RETURN_IF_ERROR(net->in(net->switch_, {"ip", "link", "set", "lo", "up"}));
  MW_RETURN_IF_ERROR(net->in(net->switch_, {"ip", "link", "add", "br0", "type", "bridge"}));
  MW_RETURN_IF_ERROR(net->in(net->switch_, {"ip", "link", "set", "br0", "up"}));
  int i = 0;
  for (const auto& name : hosts) {
    auto h = hold();
    if (!h.ok()) return h.status();
    net->hosts_[name] = *h;
    net->order_.push_back(name);
    const std::string veth = "v" + std::to_string(i);
    const std::string addr = "10.201.0." + std::to_string(i + 2);
    net->addrs_[name] = addr;
    MW_RETURN_IF_ERROR(net->in(net->switch_, {"ip", "link", "add", veth, "type", "veth", "peer",
                                              "name", "eth0", "netns", std::to_string(h->pid)}));
    MW_RETURN_IF_ERROR(net->in(net->switch_, {"ip", "link", "set", veth, "master", "br0", "up"}));
    MW_RETURN_IF_ERROR(net->in(*h, {"ip", "link", "set", "lo", "up"}));
    MW_RETURN_IF_ERROR(net->in(*h, {"ip", "addr", "add", addr + "/24", "dev", "eth0"}));
    MW_RETURN_IF_ERROR(net->in(*h, {"ip", "link", "set", "eth0", "up"}));
    ++i;
  }
  return net;
}

SimNet::~SimNet() {
  for (auto& [name, h] : hosts_) {
    ::kill(h.pid, SIGKILL);
    ::waitpid(h.pid, nullptr, 0);
  }
  if (switch_.pid > 0) {
    ::kill(switch_.pid, SIGKILL);
    ::waitpid(switch_.pid, nullptr, 0);
  }
}

namespace {
ino_t netnsInode(pid_t pid) {
  struct stat st {};
  std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}
}  // namespace

std::vector<ino_t> SimNet::namespaceInodes() const {
  std::vector<ino_t> out;
  if (switch_.pid > 0) out.push_back(netnsInode(switch_.pid));
  for (const auto& [name, h] : hosts_) out.push_back(netnsInode(h.pid));
  std::erase(out, ino_t{0});
  return out;
}

int namespacesAlive(const std::vector<ino_t>& inodes) {
  std::set<ino_t> alive;
  for (pid_t pid : allPids()) {
    ino_t ino = netnsInode(pid);
    if (std::find(inodes.begin(), inodes.end(), ino) != inodes.end()) alive.insert(ino);
  }
  return static_cast<int>(alive.size());
}

std::string SimNet::address(const std::string& host) const {
  auto it = addrs_.find(host);
  return it == addrs_.end() ? "" : it->second;
}

std::string SimNet::netns(const std::string& host) const {
  auto it = hosts_.find(host);
  return it == hosts_.end() ? "" : "/proc/" + std::to_string(it->second.pid) + "/ns/net";
}

Status SimNet::forHost(const std::string& host, const Holder** h, std::string* addr) const {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return Status(Code::kInvalidArgument, "no simulated host '" + host + "'");
  *h = &it->second;
  *addr = addrs_.at(host);
  return Status::Ok();
}

Status SimNet::partition(const std::vector<std::string>& a, const std::vector<std::string>& b,
                         bool loud, bool oneway) {
  auto cut = [&](const std::string& from, const std::string& to) -> Status {
    const Holder* hf = nullptr;
    const Holder* ht = nullptr;
    std::string af, at;
    MW_RETURN_IF_ERROR(forHost(from, &hf, &af));
    MW_RETURN_IF_ERROR(forHost(to, &ht, &at));
    if (loud) {
      // TCP gets a reset at once; anything else an ICMP "port unreachable".
      MW_RETURN_IF_ERROR(in(*hf, {"iptables", "-A", "OUTPUT", "-d", at, "-p", "tcp", "-j", "REJECT",
                                  "--reject-with", "tcp-reset"}));
      return in(*hf, {"iptables", "-A", "OUTPUT", "-d", at, "-j", "REJECT"});
    }
    return in(*hf, {"iptables", "-A", "OUTPUT", "-d", at, "-j", "DROP"});
  };
  for (const auto& x : a) {
    for (const auto& y : b) {
      MW_RETURN_IF_ERROR(cut(x, y));
      if (!oneway) MW_RETURN_IF_ERROR(cut(y, x));
    }
  }
  return Status::Ok();
}

Status SimNet::loss(const std::string& host, double p) {
  const Holder* h = nullptr;
  std::string addr;
  MW_RETURN_IF_ERROR(forHost(host, &h, &addr));
  char prob[32];
  std::snprintf(prob, sizeof(prob), "%.4f", p);
  MW_RETURN_IF_ERROR(in(*h, {"iptables", "-A", "INPUT", "!", "-i", "lo", "-m", "statistic",
                             "--mode", "random", "--probability", prob, "-j", "DROP"}));
  MW_RETURN_IF_ERROR(in(*h, {"iptables", "-A", "OUTPUT", "!", "-o", "lo", "-m", "statistic",
                             "--mode", "random", "--probability", prob, "-j", "DROP"}));
  return Status::Ok();
}

Status SimNet::bandwidth(const std::string& host, const std::string& rate) {
  const Holder* h = nullptr;
  std::string addr;
  MW_RETURN_IF_ERROR(forHost(host, &h, &addr));
  return in(*h, {"tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst",
                 "64kb", "latency", "400ms"});
}

Status SimNet::delay(const std::string& host, int ms, int jitter_ms) {
  const Holder* h = nullptr;
  std::string addr;
  MW_RETURN_IF_ERROR(forHost(host, &h, &addr));
  Status s = in(*h, {"tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay",
                     std::to_string(ms) + "ms", std::to_string(jitter_ms) + "ms"});
  if (!s.ok() && (s.message().find("netem") != std::string::npos ||
                  s.message().find("qdisc kind is unknown") != std::string::npos)) {
    return Status(
        Code::kUnavailable,
        "this kernel has no netem qdisc (sch_netem), so delay cannot be simulated: " + s.message());
  }
  return s;
}

Status SimNet::heal() {
  Status first;
  for (const auto& name : order_) {
    const Holder& h = hosts_.at(name);
    for (const char* chain : {"INPUT", "OUTPUT"}) {
      Status s = in(h, {"iptables", "-F", chain});
      if (first.ok() && !s.ok()) first = s;
    }
    // No qdisc to delete is fine.
    in(h, {"tc", "qdisc", "del", "dev", "eth0", "root"}).ignore();
  }
  return first;
}

}  // namespace mw::chaos
