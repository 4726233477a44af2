// libFuzzer target: a live StoreServer fed untrusted bytes over TCP loopback.
//
// Two servers live for the whole run: one without a token and one with a token, both hosting a
// world of 4 so that membership frames reach their handlers. The first input byte picks the
// server (bit 0) and whether a real client greets it first (bit 1), so that frames after a
// completed handshake are fuzzed on the token server too; the rest is sent, then the write side
// is shut, and replies are read until the server closes or stays quiet for 20 ms. Every 64
// inputs a legitimate client must still be served: a server that stops answering aborts.
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "multiworld/store.h"
#include "store/socket.h"

namespace {

using namespace std::chrono_literals;

const char kToken[] = "fuzz-token";

struct Servers {
  std::unique_ptr<mw::StoreServer> open, closed;
  Servers() {
    mw::StoreServerOptions o;
    o.world_name = "fuzz";
    o.world_size = 4;
    o.heartbeat_timeout = 60000ms;  // no silence verdicts between inputs
    o.handshake_timeout = 2000ms;
    o.max_frame_bytes = 64 << 10;
    o.max_buffered_bytes = 1 << 20;
    open = mw::StoreServer::start(o).value();
    o.token = kToken;
    closed = mw::StoreServer::start(o).value();
  }
};

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
  if (++inputs % 64 == 0) {
    stillServes(*s.open, "");
    stillServes(*s.closed, kToken);
  }
  return 0;
}
