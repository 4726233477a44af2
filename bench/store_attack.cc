// mw_bench store-attack: a world's store under attack by clients that hold no token, while the
// world forms and then works.
//
// This process hosts a world of three members (three WorldManagers, a random token). Before the
// other two join, attacker threads start on the store's port and keep going to the end:
//   - idle:      --idle sockets that connect and never send a byte (re-opened when closed);
//   - slowloris: --slow sockets that send a HELLO one byte every 50 ms;
//   - oversized: one thread that connects and announces 16 MiB frames, sending junk behind;
//   - bad auth:  one thread that answers every CHALLENGE with a wrong proof;
//   - stale:     rank 2 joins with the token and drops before the world forms (a restart).
// Then ranks 1 and 2 join (deadline 10 s) and the three all_reduce 256 KiB for --seconds.
// Targets: the world forms, the joins meet their deadline, nothing breaks, and the process's
// resident memory grows by less than --rss-budget-mb. Informational: all_reduce rate under
// attack vs in the same process before the attack, the attackers' counts.
//
// --tokenless: the world has no token, so every local process may use its store (what a store
// without a token can promise: docs/store-protocol.md, "Without a token"); instead of the wrong
// proofs, two attacks that only a store without a token (or a client holding its token) allows:
//   - unread:    one client stores a --value-mib value, then --unread sockets GET it and never
//                read the reply (re-opened when the store closes them);
//   - flood:     --flood sockets that send HELLO and hold their connection (re-opened when closed),
//                past the store's 4,096 connections;
// all under an address-space limit of --address-space-gb, as the probe that found them ran.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "bench_util.h"
#include "multiworld/multiworld.h"
#include "subcommands.h"

namespace mwb {

const char* const kStoreAttackHelp =
    "mw_bench store-attack [--seconds S] [--idle N] [--slow N] [--rss-budget-mb MB]\n"
    "                      [--tokenless [--unread N] [--value-mib M] [--flood N]\n"
    "                       [--address-space-gb G]] [--json PATH] [--strict]\n"
    "\n"
    "A world of 3 members (in this process, random token) forms and all_reduces 256 KiB for\n"
    "--seconds (default 20) while its store is attacked by clients without the token: --idle\n"
    "idle sockets (default 500), --slow slowloris sockets (default 100), a thread sending 16 MiB\n"
    "frames, a thread failing the challenge, and a stale rank 2 that joins and drops before the\n"
    "world forms. Targets: the world forms and stays healthy, ranks 1 and 2 join within their\n"
    "10 s deadline, resident memory grows by less than --rss-budget-mb (default 64).\n"
    "\n"
    "  --tokenless   the world has no token: instead of wrong proofs, --unread sockets (default\n"
    "                300) GET a --value-mib value (default 15) and never read the reply, and\n"
    "                --flood sockets (default 4200) send HELLO and hold on; the process runs "
    "under\n"
    "                an address-space limit of --address-space-gb (default 3), and the memory\n"
    "                target becomes the store's budget (256 MiB) plus --rss-budget-mb (default\n"
    "                then 128)\n"
    "  --json PATH   write the figures\n"
    "  --strict      exit 1 when a target is missed\n";

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

long rssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

int connectTo(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the server closed `fd` (EOF or error), without waiting.
bool closedByServer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char buf[512];
  ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

std::string u32le(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// HELLO (type 1): i64 version 3, string client_nonce (docs/store-protocol.md).
std::string helloFrame() {
  std::string p(1, '\x01');
  p += std::string("\x03\0\0\0\0\0\0\0", 8);
  p += u32le(32) + std::string(32, 'n');
  return u32le(static_cast<uint32_t>(p.size())) + p;
}

// GET (type 3): string key, i64 timeout_ms 0.
std::string getFrame(const std::string& key) {
  std::string p(1, '\x03');
  p += u32le(static_cast<uint32_t>(key.size())) + key + std::string(8, '\0');
  return u32le(static_cast<uint32_t>(p.size())) + p;
}

struct Counts {
  std::atomic<long> idle_closed{0}, slow_closed{0}, oversized_closed{0}, auth_refused{0};
  std::atomic<long> unread_closed{0}, flood_closed{0};
  std::atomic<long> connect_failed{0};
};

// Keeps `n` connections open, each sent `greeting` once when it opens (and, with a small receive
// buffer, never read): re-opens those the store closes, counting them in `closed`.
void holdAttack(uint16_t port, int n, const std::string& greeting, bool small_rcvbuf,
                std::atomic<long>& closed, Counts& c, const std::atomic<bool>& stop) {
  std::vector<int> fds(static_cast<size_t>(n), -1);
  while (!stop) {
    for (int& fd : fds) {
      if (stop) break;
      if (fd >= 0 && closedByServer(fd)) {
        ::close(fd);
        fd = -1;
        ++closed;
      }
      if (fd >= 0) continue;
      if ((fd = connectTo(port)) < 0) {
        ++c.connect_failed;
        continue;
      }
      if (small_rcvbuf) {
        int bytes = 4096;
        ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
      }
      ::send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    std::this_thread::sleep_for(20ms);
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

void idleAttack(uint16_t port, int n, Counts& c, const std::atomic<bool>& stop) {
  std::vector<int> fds(static_cast<size_t>(n), -1);
  while (!stop) {
    for (int& fd : fds) {
      if (fd >= 0 && closedByServer(fd)) {
        ::close(fd);
        fd = -1;
        ++c.idle_closed;
      }
      if (fd < 0 && (fd = connectTo(port)) < 0) ++c.connect_failed;
    }
    std::this_thread::sleep_for(20ms);
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

void slowAttack(uint16_t port, int n, Counts& c, const std::atomic<bool>& stop) {
  const std::string hello = helloFrame();
  std::vector<int> fds(static_cast<size_t>(n), -1);
  std::vector<size_t> sent(static_cast<size_t>(n), 0);
  while (!stop) {
    for (size_t i = 0; i < fds.size(); ++i) {
      int& fd = fds[i];
      if (fd >= 0 && closedByServer(fd)) {
        ::close(fd);
        fd = -1;
        ++c.slow_closed;
      }
      if (fd < 0) {
        fd = connectTo(port);
        sent[i] = 0;
        if (fd < 0) ++c.connect_failed;
        continue;
      }
      if (sent[i] + 1 < hello.size()) {  // never the last byte
        ::send(fd, hello.data() + sent[i], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        ++sent[i];
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

// A new connection, or -1 (counted) after a short pause when the store refused it.
int connectOrWait(uint16_t port, Counts& c) {
  int fd = connectTo(port);
  if (fd < 0) {
    ++c.connect_failed;
    std::this_thread::sleep_for(10ms);
  }
  return fd;
}

void oversizedAttack(uint16_t port, Counts& c, const std::atomic<bool>& stop) {
  const std::string junk(64 << 10, 'j');
  while (!stop) {
    int fd = connectOrWait(port, c);
    if (fd < 0) continue;
    std::string head = u32le(16u << 20) + "\x02";  // a SET of 16 MiB, before any handshake
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    for (int i = 0; i < 256 && !stop; ++i) {
      if (::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) < 0) break;
    }
    ::close(fd);
    ++c.oversized_closed;
  }
}

void badAuthAttack(uint16_t port, Counts& c, const std::atomic<bool>& stop) {
  const std::string hello = helloFrame();
  std::string auth(1, '\x0c');
  auth += u32le(32) + std::string(32, 'w');
  auth = u32le(static_cast<uint32_t>(auth.size())) + auth;
  while (!stop) {
    int fd = connectOrWait(port, c);
    if (fd < 0) continue;
    ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    char buf[512];
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) > 0 && ::recv(fd, buf, sizeof(buf), 0) > 0) {
      ::send(fd, auth.data(), auth.size(), MSG_NOSIGNAL);
      // Refused: an ERROR, then the close.
      while (::poll(&p, 1, 1000) > 0 && ::recv(fd, buf, sizeof(buf), 0) > 0) {
      }
      ++c.auth_refused;
    }
    ::close(fd);
  }
}

mw::WorldOptions options(const std::string& token, int rank, uint16_t port) {
  mw::WorldOptions o;
  o.name = "attacked";
  o.rank = rank;
  o.size = 3;
  o.token = token;
  o.store = mw::StoreAddress{"127.0.0.1", port};
  o.heartbeat_timeout = 1000ms;
  return o;
}

// all_reduces per second of `bytes` across the three members, over `d`.
double allReduceRate(std::vector<mw::Communicator*>& comms, Clock::duration d,
                     std::atomic<long>* failures) {
  std::atomic<long> ops{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> v(65536, 1.0f);
      // The last element says when to stop: rank 0 sets it, and the sum reaches every member in
      // the same round, so nobody starts an all_reduce the others will not join.
      for (bool done = false; !done;) {
        v.back() = r == 0 && stop ? 1.0f : 0.0f;
        if (!comms[r]->allReduce("attacked", mw::Tensor::cpu(v.data(), v.size())).wait().ok()) {
          ++*failures;
          return;
        }
        done = v.back() > 0.5f;
        if (r == 0) ++ops;
      }
    });
  }
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(d);
  stop = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(ops) / seconds(Clock::now() - t0);
}

}  // namespace

int runStoreAttack(int argc, char** argv, int first) {
  Flags fl(argc, argv, first,
           {"--seconds", "--idle", "--slow", "--rss-budget-mb", "--json", "--unread", "--value-mib",
            "--flood", "--address-space-gb"},
           {"--strict", "--tokenless"});
  const bool tokenless = fl.has("--tokenless");
  const long secs = fl.integer("--seconds", 20, 1, 3600);
  const int idle = static_cast<int>(fl.integer("--idle", 500, 0, 100000));
  const int slow = static_cast<int>(fl.integer("--slow", 100, 0, 100000));
  const int unread = static_cast<int>(fl.integer("--unread", tokenless ? 300 : 0, 0, 100000));
  const long value_mib = fl.integer("--value-mib", 15, 1, 15);
  const int flood = static_cast<int>(fl.integer("--flood", tokenless ? 4200 : 0, 0, 100000));
  const long as_gb = fl.integer("--address-space-gb", tokenless ? 3 : 0, 0, 1 << 20);
  // Without a token the store may be made to hold its whole budget: the target counts it.
  const long store_budget_mb = tokenless ? 256 : 0;
  const long budget_mb =
      store_budget_mb + fl.integer("--rss-budget-mb", tokenless ? 128 : 64, 1, 1 << 20);
  const std::string json = fl.str("--json", "");
  if ((unread > 0 || flood > 0) && !tokenless) {
    throw UsageError("--unread and --flood need --tokenless (a store with a token refuses them)");
  }
  if (as_gb > 0) {
    // As the probe that found the unread-reply attack ran rank 0: past it, std::bad_alloc.
    rlimit as{static_cast<rlim_t>(as_gb) << 30, static_cast<rlim_t>(as_gb) << 30};
    if (::setrlimit(RLIMIT_AS, &as) != 0) throw BenchError("cannot limit the address space");
  }
  // Room for the attackers' sockets and the server's ends of them.
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);

  auto token = tokenless ? mw::Result<std::string>(std::string()) : mw::randomStoreToken();
  if (!token.ok()) throw BenchError(token.status().message());
  mw::WorldManager m0, m1, m2;
  mw::Communicator c0(m0), c1(m1), c2(m2);
  auto o0 = options(*token, 0, 0);
  auto host = m0.initWorldAsync(o0, mw::deadlineIn(30s));
  auto port = m0.storePort("attacked", mw::deadlineIn(10s));
  if (!port.ok()) throw BenchError("rank 0's store: " + port.status().message());

  const long rss0 = rssKiB();
  long rss_max = rss0;
  Counts counts;
  std::atomic<bool> stop{false};
  std::vector<std::thread> attackers;
  attackers.emplace_back(idleAttack, *port, idle, std::ref(counts), std::cref(stop));
  attackers.emplace_back(slowAttack, *port, slow, std::ref(counts), std::cref(stop));
  attackers.emplace_back(oversizedAttack, *port, std::ref(counts), std::cref(stop));
  if (!tokenless) attackers.emplace_back(badAuthAttack, *port, std::ref(counts), std::cref(stop));
  if (unread > 0) {
    auto client = mw::StoreClient::connect({"127.0.0.1", *port}, "", mw::deadlineIn(10s));
    if (!client.ok()) throw BenchError("storing the large value: " + client.status().message());
    mw::Status set = (*client)->set("big", std::string(static_cast<size_t>(value_mib) << 20, 'v'),
                                    mw::deadlineIn(10s));
    if (!set.ok()) throw BenchError("storing the large value: " + set.message());
    attackers.emplace_back(holdAttack, *port, unread, helloFrame() + getFrame("big"), true,
                           std::ref(counts.unread_closed), std::ref(counts), std::cref(stop));
  }
  if (flood > 0) {
    attackers.emplace_back(holdAttack, *port, flood, helloFrame(), false,
                           std::ref(counts.flood_closed), std::ref(counts), std::cref(stop));
  }
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling) {
      rss_max = std::max(rss_max, rssKiB());
      std::this_thread::sleep_for(100ms);
    }
  });
  std::this_thread::sleep_for(500ms);  // the attack is in full swing

  // A stale rank 2: it joins its link, and its process goes, before the world forms.
  mw::WorldManager stale;
  auto stale_join = stale.initWorldAsync(options(*token, 2, *port), mw::deadlineIn(30s));
  std::this_thread::sleep_for(300ms);
  (void)stale.removeWorld("attacked");

  const auto t_join = Clock::now();
  auto j1 = m1.initWorldAsync(options(*token, 1, *port), mw::deadlineIn(10s));
  auto j2 = m2.initWorldAsync(options(*token, 2, *port), mw::deadlineIn(10s));
  const mw::Status s1 = j1.wait(), s2 = j2.wait(), s0 = host.wait();
  const double join_ms = millis(Clock::now() - t_join);
  const bool formed = s0.ok() && s1.ok() && s2.ok();
  std::fprintf(stderr, "store-attack: joins %s / %s / %s after %.0f ms\n", s0.toString().c_str(),
               s1.toString().c_str(), s2.toString().c_str(), join_ms);

  std::vector<mw::Communicator*> comms{&c0, &c1, &c2};
  std::atomic<long> failures{0};
  double attacked_rate = 0;
  if (formed) attacked_rate = allReduceRate(comms, std::chrono::seconds(secs), &failures);
  stop = true;
  for (auto& t : attackers) t.join();
  sampling = false;
  sampler.join();
  double quiet_rate = 0;
  if (formed && failures == 0) quiet_rate = allReduceRate(comms, 3s, &failures);
  bool healthy = formed;
  for (auto* m : {&m0, &m1, &m2}) {
    auto info = m->world("attacked");
    healthy = healthy && info.ok() && info->state == mw::WorldState::kHealthy;
    if (info.ok() && info->broken) {
      std::fprintf(stderr, "store-attack: rank %d: world broken, %s (rank %d): %s\n", info->rank,
                   mw::causeName(info->broken->cause), info->broken->peer_rank,
                   info->broken->detail.c_str());
    }
  }
  healthy = healthy && failures == 0;
  const double rss_growth_mb = static_cast<double>(rss_max - rss0) / 1024.0;
  const bool joins_ok = formed && join_ms <= 10000;
  const bool rss_ok = rss_growth_mb < static_cast<double>(budget_mb);

  if (tokenless) {
    std::printf(
        "\nstore-attack --tokenless: %d idle + %d slowloris sockets, 16 MiB frames, %d unread "
        "GETs of %ld MiB, %d HELLO floods, a stale rank; %ld s, address space %ld GB\n",
        idle, slow, unread, value_mib, flood, secs, as_gb);
  } else {
    std::printf(
        "\nstore-attack: %d idle + %d slowloris sockets, 16 MiB frames, wrong proofs, "
        "a stale rank; %ld s\n",
        idle, slow, secs);
  }
  std::printf("  world formed, ranks 1-2 joined in   %7.0f ms  target <= 10000     %s\n", join_ms,
              verdict(joins_ok));
  std::printf("  healthy to the end, 0 failed ops    %7s     target yes         %s\n",
              healthy ? "yes" : "no", verdict(healthy));
  std::printf("  resident memory growth              %7.1f MiB target < %ld MiB   %s\n",
              rss_growth_mb, budget_mb, verdict(rss_ok));
  std::printf("  all_reduce 256 KiB/s under attack   %7.1f   (after it: %.1f, ratio %.2f)\n",
              attacked_rate, quiet_rate, quiet_rate > 0 ? attacked_rate / quiet_rate : 0.0);
  std::printf(
      "  closed by the store: idle %ld, slowloris %ld; oversized %ld, wrong proofs %ld; unread "
      "%ld, flood %ld; connects refused %ld\n",
      counts.idle_closed.load(), counts.slow_closed.load(), counts.oversized_closed.load(),
      counts.auth_refused.load(), counts.unread_closed.load(), counts.flood_closed.load(),
      counts.connect_failed.load());

  Json doc = Json::object();
  doc.set("benchmark", "store-attack").set("host", hostJson());
  doc.set("seconds", static_cast<double>(secs))
      .set("idle", static_cast<double>(idle))
      .set("slow", static_cast<double>(slow))
      .set("join_ms", join_ms)
      .set("formed", formed)
      .set("healthy", healthy)
      .set("rss_growth_mib", rss_growth_mb)
      .set("allreduce_per_s_attacked", attacked_rate)
      .set("allreduce_per_s_after", quiet_rate)
      .set("idle_closed", static_cast<double>(counts.idle_closed))
      .set("slow_closed", static_cast<double>(counts.slow_closed))
      .set("oversized_closed", static_cast<double>(counts.oversized_closed))
      .set("auth_refused", static_cast<double>(counts.auth_refused))
      .set("tokenless", tokenless)
      .set("unread", static_cast<double>(unread))
      .set("value_mib", static_cast<double>(value_mib))
      .set("flood", static_cast<double>(flood))
      .set("address_space_gb", static_cast<double>(as_gb))
      .set("rss_target_mib", static_cast<double>(budget_mb))
      .set("unread_closed", static_cast<double>(counts.unread_closed))
      .set("flood_closed", static_cast<double>(counts.flood_closed));
  writeJson(json, doc);
  (void)stale_join.wait(mw::deadlineIn(1s));
  return (!joins_ok || !healthy || !rss_ok) && strict(argc, argv, first) ? 1 : 0;
}

}  // namespace mwb
