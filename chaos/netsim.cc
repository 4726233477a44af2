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

Status SimNet::available() {
  if (::geteuid() != 0) {
    return Status(Code::kUnavailable,
                  "simulated hosts and network faults need root (network namespaces, iptables "
                  "and tc); run mwchaos as root");
  }
  for (const char* prog : {"ip", "iptables", "tc", "nsenter"}) {
    if (whichProgram(prog).empty()) {
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
  std::vector<std::string> cmd = {"nsenter", "-t", std::to_string(h.pid), "-n",
                                  whichProgram(argv.at(0))};
  cmd.insert(cmd.end(), argv.begin() + 1, argv.end());
  return runProgram(cmd);
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

}  // namespace mw::chaos
