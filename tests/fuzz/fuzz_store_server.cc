// libFuzzer target: a live StoreServer fed untrusted bytes over TCP loopback.
//
// Two servers live for the whole run: one without a token and one with a token, both hosting a
// world of 4 so that membership frames reach their handlers. The first input byte picks the
// server (bit 0) and whether a real client greets it first (bit 1), so that frames after a
// completed handshake are fuzzed on the token server too; the rest is sent, then the write side
// is shut, and replies are read until the server closes or stays quiet for 20 ms. Every 64
// inputs a legitimate client must still be served: a server that stops answering aborts.
//
// Bit 2 makes the client one that never reads: its connection (with a 4 KiB receive buffer) is
// kept open, unread, across inputs (the last 32 of them), so that replies pile up in the server
// (each server holds a 60 KiB value, "fuzz/big", to ask for). After every input the server's
// memory must stay within its budget: what it counts now at most max_buffered_bytes plus what
// one wake-up adds (a read of 1 MiB or one reply), its peak as well; otherwise abort.
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>

#include "multiworld/store.h"
#include "store/socket.h"

namespace {

using namespace std::chrono_literals;

const char kToken[] = "fuzz-token";
constexpr size_t kBudget = 1 << 20;
constexpr size_t kMaxFrame = 64 << 10;
// What one wake-up may add before the budget is enforced: a read of up to 1 MiB (the server's
// per-connection read budget), or one reply whose queue doubled its capacity.
constexpr size_t kSlack = (1 << 20) + 2 * (kMaxFrame + 1024);

void storeBig(mw::StoreServer& server, const std::string& token) {
  auto client = mw::StoreClient::connect({"127.0.0.1", server.port()}, token, mw::deadlineIn(5s));
  if (!client.ok() ||
      !(*client)->set("fuzz/big", std::string(60 << 10, 'b'), mw::deadlineIn(5s)).ok()) {
    std::abort();
  }
}

struct Servers {
  std::unique_ptr<mw::StoreServer> open, closed;
  Servers() {
    mw::StoreServerOptions o;
    o.world_name = "fuzz";
    o.world_size = 4;
    o.heartbeat_timeout = 60000ms;  // no silence verdicts between inputs
    o.handshake_timeout = 2000ms;
    o.max_frame_bytes = kMaxFrame;
    o.max_buffered_bytes = kBudget;
    open = mw::StoreServer::start(o).value();
    o.token = kToken;
    closed = mw::StoreServer::start(o).value();
    storeBig(*open, "");
    storeBig(*closed, kToken);
  }
  std::deque<mw::store::Fd> unread;  // connections of clients that never read
};

void withinBudget(const mw::StoreServer& server) {
  const mw::StoreServerStats st = server.stats();
  if (st.peak_buffered_bytes > kBudget + kSlack) std::abort();
}

Servers& servers() {
  static Servers s;
  return s;
}

void stillServes(mw::StoreServer& server, const std::string& token) {
  auto client = mw::StoreClient::connect({"127.0.0.1", server.port()}, token, mw::deadlineIn(5s));
  if (!client.ok() || !(*client)->set("fuzz/alive", "1", mw::deadlineIn(5s)).ok()) std::abort();
}

}  // namespace

// The servers' threads run until the process exits; OpenSSL's own exit-time cleanup would free its
// global state under them and leave their per-thread state looking leaked to LeakSanitizer.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static long inputs = 0;
  Servers& s = servers();
  if (size == 0) return 0;
  const bool with_token = (data[0] & 1) != 0;
  const bool greet = (data[0] & 2) != 0;
  const bool never_read = (data[0] & 4) != 0;
  mw::StoreServer& server = with_token ? *s.closed : *s.open;
  const mw::StoreAddress address{"127.0.0.1", server.port()};
  mw::store::Fd fd;
  if (greet) {
    auto greeted =
        mw::store::connectAndGreet(address, with_token ? kToken : "", mw::deadlineIn(5s));
    if (!greeted.ok()) std::abort();  // a fresh, legitimate client must always get in
    fd = std::move(*greeted);
  } else {
    auto connected = mw::store::connectTcp(address, mw::deadlineIn(5s));
    if (!connected.ok()) std::abort();
    fd = std::move(*connected);
  }
  if (never_read) {
    int small = 4096;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    mw::store::sendAll(fd.get(),
                       std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1),
                       mw::deadlineIn(1s))
        .ignore();
    s.unread.push_back(std::move(fd));
    if (s.unread.size() > 32) s.unread.pop_front();
    withinBudget(server);
    return 0;
  }
  mw::store::sendAll(fd.get(), std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1),
                     mw::deadlineIn(1s))
      .ignore();  // the server may close first: part of what is fuzzed
  ::shutdown(fd.get(), SHUT_WR);
  char buf[4096];
  while (true) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) break;
    if (::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT) <= 0) break;
  }
  withinBudget(server);
  if (++inputs % 64 == 0) {
    stillServes(*s.open, "");
    stillServes(*s.closed, kToken);
  }
  return 0;
}
