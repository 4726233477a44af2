// The store under clients that are not members: the challenge-response handshake, the limits on
// connections that have not authenticated (frame size, deadline, count), the input budget, and a
// rank that comes and goes before its world forms (docs/store-protocol.md, "Limits").
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "store/auth.h"
#include "store_support.h"
#include "support/hosted_world.h"

namespace mw {
namespace {

using namespace store_test;  // NOLINT
using std::chrono::milliseconds;
using store::Message;

// Reads from `raw` until one whole frame has arrived.
Message readFrame(RawConn& raw, Deadline deadline) {
  std::string bytes;
  char buf[4096];
  while (store::waitReady(raw.fd(), POLLIN, deadline).ok()) {
    ssize_t n = ::recv(raw.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    REQUIRE(n != 0);
    if (n > 0) bytes.append(buf, static_cast<size_t>(n));
    auto frames = framesIn(bytes);
    if (!frames.empty()) return frames.front();
  }
  FAIL("no frame before the deadline");
  return store::msg::Ok{};
}

std::string hello(const std::string& client_nonce) {
  return store::encodeFrame(store::msg::Hello{store::kProtocolVersion, client_nonce});
}

const std::string kToken = "s3cret-token-of-the-world";

TEST_CASE("store handshake: each side proves the token, which never travels",
          "[runtime][store][auth]") {
  StoreServerOptions options;
  options.token = kToken;
  auto server = startServer(options);

  SECTION("a client with the token gets in; without it, or with another, it does not") {
    CHECK(connectTo(*server, kToken)->set("k", "v", in(2000)).ok());
    auto none = StoreClient::connect(addressOf(*server), "", in(2000));
    CHECK(none.status().code() == Code::kPermissionDenied);
    CHECK_THAT(none.status().message(), Catch::Contains("requires a token"));
    auto other = StoreClient::connect(addressOf(*server), "another", in(2000));
    CHECK(other.status().code() == Code::kPermissionDenied);
  }

  SECTION("a wrong proof is refused, and a proof is good for its own nonces only") {
    const std::string client_nonce(store::auth::kNonceBytes, 'c');
    RawConn first(server->port());
    first.send(hello(client_nonce));
    auto challenge = std::get<store::msg::Challenge>(readFrame(first, in(3000)));
    CHECK(challenge.server_nonce.size() == store::auth::kNonceBytes);
    // The server proved it holds the token.
    CHECK(store::auth::equalProofs(
        challenge.server_proof,
        store::auth::serverProof(kToken, client_nonce, challenge.server_nonce)));
    const std::string proof =
        store::auth::clientProof(kToken, client_nonce, challenge.server_nonce);
    first.send(store::encodeFrame(store::msg::Auth{proof}));
    CHECK(std::holds_alternative<store::msg::Ok>(readFrame(first, in(3000))));

    // Replayed on a new connection (same client nonce, a new server nonce): refused.
    RawConn replay(server->port());
    replay.send(hello(client_nonce));
    auto second = std::get<store::msg::Challenge>(readFrame(replay, in(3000)));
    CHECK(second.server_nonce != challenge.server_nonce);
    replay.send(store::encodeFrame(store::msg::Auth{proof}));
    auto [bytes, eof] = replay.readToEof(in(3000));
    CHECK(eof);
    auto error = firstError(bytes);
    CHECK(error.code == Code::kPermissionDenied);
    CHECK_THAT(error.message, Catch::Contains("wrong store token"));
  }

  SECTION("AUTH before a CHALLENGE, and requests before the handshake, are refused") {
    RawConn raw(server->port());
    raw.send(store::encodeFrame(store::msg::Auth{std::string(32, 'x')}));
    auto [bytes, eof] = raw.readToEof(in(3000));
    CHECK(eof);
    CHECK_THAT(firstError(bytes).message, Catch::Contains("AUTH before this store's CHALLENGE"));
  }
}

TEST_CASE("a client refuses a store that cannot prove it holds the token",
          "[runtime][store][auth]") {
  // A stand-in for the store (a process that took the port after the real store went): it reads
  // the client's HELLO and answers with a made-up proof.
  auto listener = store::listenTcp("127.0.0.1", 0, 4);
  REQUIRE(listener.ok());
  const uint16_t port = store::localPort(listener->get()).value();
  std::string seen;
  std::thread impostor([&] {
    REQUIRE(store::waitReady(listener->get(), POLLIN, in(5000)).ok());
    store::Fd conn(::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
    auto payload = store::recvFrame(conn.get(), 1024, in(5000));
    REQUIRE(payload.ok());
    seen = *payload;
    store::sendAll(
        conn.get(),
        store::encodeFrame(store::msg::Challenge{std::string(32, 'n'), std::string(32, 'p')}),
        in(2000))
        .ignore();
    char byte;
    ::recv(conn.get(), &byte, 1, 0);  // until the client hangs up
  });
  auto client = StoreClient::connect(StoreAddress{"127.0.0.1", port}, kToken, in(5000));
  impostor.join();
  CHECK(client.status().code() == Code::kPermissionDenied);
  CHECK_THAT(client.status().message(), Catch::Contains("could not prove"));
  CHECK(seen.find(kToken) == std::string::npos);  // what the client sent holds no token
  CHECK(seen.size() == 1 + 8 + 4 + store::auth::kNonceBytes);
}

TEST_CASE("a client with a token refuses a store that asks for none", "[runtime][store][auth]") {
  auto open = startServer();
  auto client = StoreClient::connect(addressOf(*open), kToken, in(2000));
  CHECK(client.status().code() == Code::kPermissionDenied);
  CHECK_THAT(client.status().message(), Catch::Contains("requires no token"));
}

TEST_CASE("before its handshake a connection may send one small frame",
          "[runtime][store][limits]") {
  auto server = startServer();
  RawConn raw(server->port());
  raw.send(std::string("\x00\x10\x00\x00", 4));  // a 4 KiB frame announced before HELLO
  auto [bytes, eof] = raw.readToEof(in(3000));
  CHECK(eof);
  CHECK_THAT(firstError(bytes).message,
             Catch::Contains("frame of 4096 bytes exceeds the limit of 256 bytes"));
  CHECK(connectTo(*server)->set("k", "v", in(2000)).ok());
}

TEST_CASE("a connection that does not finish its handshake in time is closed",
          "[runtime][store][limits]") {
  StoreServerOptions options;
  options.token = kToken;
  options.handshake_timeout = milliseconds(200);
  auto server = startServer(options);
  const auto start = Clock::now();
  RawConn idle(server->port());
  RawConn half(server->port());
  half.send(std::string("\x2d\x00\x00\x00\x01\x02", 6));  // the start of a HELLO, never finished
  for (RawConn* raw : {&idle, &half}) {
    auto [bytes, eof] = raw->readToEof(in(upTo(3000)));
    CHECK(eof);
    auto error = firstError(bytes);
    CHECK(error.code == Code::kTimeout);
    CHECK_THAT(error.message, Catch::Contains("handshake not completed within 200 ms"));
  }
  CHECK(msSince(start) >= 190);
  CHECK(connectTo(*server, kToken)->set("k", "v", in(2000)).ok());
}

TEST_CASE("idle connections cannot crowd out a client", "[runtime][store][limits]") {
  // 100 sockets that never send a byte against a store of 64 connections: before the cap on
  // connections in their handshake, the client was refused ("limit of 64 connections").
  StoreServerOptions options;
  options.token = kToken;
  options.max_connections = 64;
  options.max_handshaking = 8;
  auto server = startServer(options);
  std::vector<std::unique_ptr<RawConn>> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(std::make_unique<RawConn>(server->port()));
  std::this_thread::sleep_for(milliseconds(100));  // older than the 50 ms a handshake may take
  auto client = connectTo(*server, kToken);
  CHECK(client->set("k", "v", in(2000)).ok());
  int closed = 0;
  for (auto& raw : idle) closed += raw->readToEof(in(1)).second ? 1 : 0;
  CHECK(closed >= 100 - 8);
}

TEST_CASE("the store's input budget closes the connection holding the most",
          "[runtime][store][limits]") {
  StoreServerOptions options;
  options.max_frame_bytes = 64 << 10;
  options.max_buffered_bytes = 200 << 10;
  auto server = startServer(options);
  auto client = connectTo(*server);
  REQUIRE(client->set("k", "v", in(2000)).ok());
  // Five clients each send most of a 64 KiB frame: 250 KiB buffered, over the 200 KiB budget.
  std::vector<std::unique_ptr<RawConn>> hogs;
  for (int i = 0; i < 5; ++i) {
    auto raw = std::make_unique<RawConn>(server->port());
    raw->send(hello(""));
    REQUIRE(std::holds_alternative<store::msg::Ok>(readFrame(*raw, in(3000))));
    std::string partial = store::encodeFrame(
        store::msg::Set{"big", std::string((60 << 10) + static_cast<size_t>(i), 'x')});
    raw->send(std::string_view(partial).substr(0, partial.size() - 10));
    hogs.push_back(std::move(raw));
  }
  int refused = 0;
  for (auto& raw : hogs) {
    auto [bytes, eof] = raw->readToEof(in(500));
    if (!eof) continue;
    ++refused;
    auto error = firstError(bytes);
    CHECK(error.code == Code::kUnavailable);
    CHECK_THAT(error.message, Catch::Contains("over its budget of 204800 bytes"));
  }
  CHECK(refused >= 1);
  CHECK(refused <= 2);
  CHECK(client->get("k", in(2000)).value() == "v");  // the store lives, and serves the others
}

TEST_CASE("a rank that leaves before its world forms is no loss", "[runtime][store]") {
  // Before, rank 0 was told "rank 1 died" as soon as the world formed, although the rank 1 that
  // joined later was alive.
  StoreServerOptions options = worldStore(3);
  auto server = startServer(options);
  auto zero = joinAs(*server, 0);
  joinAs(*server, 1).reset();     // joins, and its process goes
  auto one = joinAs(*server, 1);  // the rank's new process takes its place
  auto two = joinAs(*server, 2);  // the world forms
  auto notice = awaitNotice(*zero, {zero.get(), one.get(), two.get()}, in(upTo(600)));
  INFO((notice.ok() ? notice->detail : notice.status().toString()));
  CHECK(notice.status().code() == Code::kTimeout);  // no notice: nobody was lost
  CHECK_FALSE(connectTo(*server)->check({"mw/broken"}, in(2000)).value());
}

}  // namespace
}  // namespace mw

namespace mw {
namespace {

TEST_CASE("out of descriptors, the store closes an idle handshake to let a client in",
          "[runtime][store][limits]") {
  // Before, accept failing with EMFILE paused the listener: a legitimate HELLO got no answer while
  // idle sockets held every descriptor (seen at a 1,024-descriptor limit). The store runs in a
  // process of its own with room for 12 more descriptors; 50 sockets that never send a byte
  // connect first.
  auto host = test::worker({"--store-fds", "12", "--exit-after-ms", "30000"});
  auto line = host->readLine(std::chrono::seconds(10));
  REQUIRE(line);
  REQUIRE(line->rfind("store ", 0) == 0);
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(6)));
  std::vector<std::unique_ptr<RawConn>> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(std::make_unique<RawConn>(port));
  std::this_thread::sleep_for(milliseconds(200));  // the store accepted what it could
  auto client = StoreClient::connect({"127.0.0.1", port}, "fuzz-token", in(upTo(5000)));
  INFO(client.status().toString());
  REQUIRE(client.ok());
  CHECK((*client)->set("k", "v", in(2000)).ok());
}

}  // namespace
}  // namespace mw
