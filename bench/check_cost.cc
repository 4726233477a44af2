// mw_check_cost: runs OPS operations of one traffic pattern between two members of a Gloo world in
// this process (one thread each), with mw_worker's data checks (chaos/traffic_check.h, the default
// sample) or without, and nothing else. bench/check_cost.sh runs it under callgrind at two counts
// of operations: the difference of the instructions, per operation, is what one operation costs
// in user space, with and without the checks (docs/benchmarks.md, "Data checks").
//
//   mw_check_cost ring_allreduce|gather_to_leader BYTES OPS on|off
//
// Exit 0 after OPS operations; 2 on bad arguments; 3 when the world cannot be joined or an
// operation fails.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "chaos/traffic_check.h"
#include "multiworld/multiworld.h"

namespace {

[[noreturn]] void die(int code, const std::string& why) {
  std::fprintf(stderr, "mw_check_cost: %s\n", why.c_str());
  std::exit(code);
}

uint16_t freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    die(3, std::string("no free port: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

void check(const mw::Status& s, const char* what) {
  if (!s.ok()) die(3, std::string(what) + ": " + s.toString());
}

// One member: joins, then does `ops` operations as mw_worker's traffic loop does them.
void member(int rank, uint16_t port, bool allreduce, size_t count, long ops, bool checks) {
  mw::WorldManager manager;
  mw::WorldOptions o;
  o.name = "w";
  o.rank = rank;
  o.size = 2;
  o.store.host = "127.0.0.1";
  o.store.port = port;
  // Generous: under callgrind everything runs about 50 times slower.
  o.heartbeat_timeout = std::chrono::seconds(120);
  o.op_timeout = std::chrono::seconds(600);
  check(manager.initWorld(o, mw::deadlineIn(std::chrono::seconds(300))), "join");
  mw::Communicator comm(manager);
  std::vector<float> buf(count, 0.0f);
  const mw::Tensor t = mw::Tensor::cpu(buf.data(), count);
  mw::chaos::TrafficCheck tc(mw::DType::kFloat32, count, allreduce ? 2 : 1);
  tc.begin(1, 0x5eed5eed5eedULL, 2);  // the nonce mw_worker agrees on first: fixed here
  for (long i = 0; i < ops; ++i) {
    if (allreduce) {
      if (checks) tc.fill(buf.data(), rank);
      check(comm.allReduce("w", t).synchronize(), "all_reduce");
      if (checks && tc.reduced(buf.data(), rank)) die(3, "a violation");
    } else if (rank == 1) {
      if (checks) tc.fill(buf.data(), 1);
      check(comm.send("w", t, 0), "send");
    } else {
      check(comm.recv("w", t, 1), "recv");
      if (checks && tc.receive(buf.data(), 1)) die(3, "a violation");
    }
  }
  check(comm.barrier("w").wait(), "barrier");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: mw_check_cost ring_allreduce|gather_to_leader BYTES OPS on|off\n");
    return 2;
  }
  const std::string pattern = argv[1], on = argv[4];
  const long long bytes = std::atoll(argv[2]);
  const long ops = std::atol(argv[3]);
  if ((pattern != "ring_allreduce" && pattern != "gather_to_leader") || bytes < 4 ||
      bytes > (1LL << 30) || ops < 0 || (on != "on" && on != "off")) {
    std::fprintf(stderr,
                 "mw_check_cost: bad arguments\n"
                 "usage: mw_check_cost ring_allreduce|gather_to_leader BYTES OPS on|off\n");
    return 2;
  }
  const uint16_t port = freePort();
  const bool allreduce = pattern == "ring_allreduce";
  const size_t count = static_cast<size_t>(bytes) / sizeof(float);
  std::thread other(member, 1, port, allreduce, count, ops, on == "on");
  member(0, port, allreduce, count, ops, on == "on");
  other.join();
  std::printf("%ld operations\n", ops);
  return 0;
}
