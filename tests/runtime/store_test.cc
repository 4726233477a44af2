// Store: wire decoding, key-value ops and deadlines, untrusted input, tokens, and membership
// (join validation, death, silence, BROKEN reports, server stop).
#include "multiworld/store.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <deque>
#include <optional>
#include <random>
#include <thread>

#include "store/member_link.h"
#include "store/socket.h"
#include "store/wire.h"
#include "store_support.h"
#include "support/util.h"

namespace mw {
namespace {

using namespace store_test;  // NOLINT: the helpers are this file's vocabulary
using std::chrono::milliseconds;
using store::Message;

TEST_CASE("wire round-trips every message type", "[runtime][store]") {
  std::vector<Message> all = {store::msg::Hello{2, std::string(32, '\x7f')},
                              store::msg::Set{"k", std::string("v\0x", 3)},
                              store::msg::Get{"k", 250},
                              store::msg::Wait{{"a", "b"}, 7},
                              store::msg::Check{{"a"}},
                              store::msg::Add{"n", -5},
                              store::msg::CompareSet{"k", true, "e", "d"},
                              store::msg::Delete{"k"},
                              store::msg::MemberJoin{"w", 4, 3},
                              store::msg::Heartbeat{},
                              store::msg::Broken{Cause::kOpTimeout, "why"},
                              store::msg::Auth{std::string(32, 'p')},
                              store::msg::Formed{},
                              store::msg::MemberClient{"w", 4, 2},
                              store::msg::Ok{},
                              store::msg::Value{"v"},
                              store::msg::Bool{true},
                              store::msg::Int{INT64_MIN},
                              store::msg::Timeout{"late"},
                              store::msg::Error{Code::kPermissionDenied, "no"},
                              store::msg::JoinOk{10, 100},
                              store::msg::Ping{},
                              store::msg::Notice{2, Cause::kPeerSilent, "quiet"},
                              store::msg::Challenge{std::string(32, 'n'), std::string(32, 'q')}};
  REQUIRE(all.size() == std::variant_size_v<Message>);
  // The store's large replies are encoded on their own path: the same bytes.
  for (std::string v : {std::string(), std::string("v\0x", 3), std::string(70000, 'z')}) {
    CHECK(store::encodeValueFrame(v) == store::encodeFrame(store::msg::Value{v}));
  }
  for (const auto& m : all) {
    std::string frame = store::encodeFrame(m);
    INFO(store::msgTypeName(store::typeOf(m)));
    store::FrameReader reader(1024);
    std::string payload;
    for (char c : frame) {  // byte by byte: incremental decoding
      auto got = reader.next(&payload);
      REQUIRE(got.ok());
      REQUIRE_FALSE(*got);
      reader.append(&c, 1);
    }
    auto got = reader.next(&payload);
    REQUIRE((got.ok() && *got));
    auto decoded = store::decodePayload(payload);
    REQUIRE(decoded.ok());
    CHECK(store::encodeFrame(*decoded) == frame);
    // Every truncation and every extension is rejected cleanly.
    for (size_t cut = 0; cut < payload.size(); ++cut) {
      CHECK_FALSE(store::decodePayload(std::string_view(payload).substr(0, cut)).ok());
    }
    auto trailing = store::decodePayload(payload + "x");
    REQUIRE_FALSE(trailing.ok());
    CHECK(trailing.status().message().find("trailing") != std::string::npos);
  }
}

TEST_CASE("wire rejects bad lengths, types and limits", "[runtime][store]") {
  store::FrameReader reader(100);
  std::string payload;
  reader.append("\xff\xff\xff\x7f", 4);
  auto big = reader.next(&payload);
  REQUIRE_FALSE(big.ok());
  CHECK(big.status().message().find("2147483647 bytes exceeds the limit of 100") !=
        std::string::npos);
  CHECK_FALSE(store::decodePayload("\xee").ok());
  CHECK(store::decodePayload("\xee").status().message().find("unknown message type 238") !=
        std::string::npos);
  CHECK_FALSE(store::decodePayload("").ok());
  std::string long_key = store::encodeFrame(store::msg::Get{std::string(5000, 'k'), 1}).substr(4);
  CHECK(store::decodePayload(long_key).status().message().find("exceeds limit 4096") !=
        std::string::npos);
  std::vector<std::string> many(4097, "k");
  std::string wait = store::encodeFrame(store::msg::Wait{many, 1}).substr(4);
  CHECK_FALSE(store::decodePayload(wait).ok());
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {  // random payloads never crash the decoder
    std::string junk(rng() % 40, '\0');
    for (auto& c : junk) c = static_cast<char>(rng() % 8 == 0 ? rng() % 80 : rng());
    store::decodePayload(junk).status().ignore();
  }
}

TEST_CASE("parseStoreAddress", "[runtime][store]") {
  auto ok = parseStoreAddress("10.0.0.1:29500");
  REQUIRE(ok.ok());
  CHECK(ok->host == "10.0.0.1");
  CHECK(ok->port == 29500);
  CHECK(ok->str() == "10.0.0.1:29500");
  for (const char* bad : {"nohost", ":80", "h:0", "h:65536", "h:x1", "h:"}) {
    auto r = parseStoreAddress(bad);
    INFO(bad);
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("store ops", "[runtime][store]") {
  auto server = startServer();
  auto client = connectTo(*server);
  REQUIRE(client->set("a", "1", in(2000)).ok());
  CHECK(client->get("a", in(2000)).value() == "1");
  CHECK(client->wait({"a"}, in(2000)).ok());
  CHECK(client->check({"a"}, in(2000)).value());
  CHECK_FALSE(client->check({"a", "zz"}, in(2000)).value());
  CHECK(client->add("n", 5, in(2000)).value() == 5);
  CHECK(client->add("n", -7, in(2000)).value() == -2);
  CHECK(client->get("n", in(2000)).value() == "-2");
  auto not_int = client->add("a", 1, in(2000));  // "1" is fine
  CHECK(not_int.value() == 2);
  REQUIRE(client->set("s", "text", in(2000)).ok());
  CHECK(client->add("s", 1, in(2000)).status().code() == Code::kInvalidUsage);
  // compareSet: absent expectation, mismatch, match.
  CHECK(client->compareSet("c", true, "", "first", in(2000)).value() == "first");
  CHECK(client->compareSet("c", true, "", "second", in(2000)).value() == "first");
  CHECK(client->compareSet("c", false, "nope", "second", in(2000)).value() == "first");
  CHECK(client->compareSet("c", false, "first", "second", in(2000)).value() == "second");
  CHECK(client->compareSet("absent", false, "x", "y", in(2000)).value() == "");
  CHECK(client->remove("c", in(2000)).value());
  CHECK_FALSE(client->remove("c", in(2000)).value());
  CHECK_FALSE(client->check({"c"}, in(2000)).value());
  std::string big(1 << 20, 'b');
  REQUIRE(client->set("big", big, in(5000)).ok());
  CHECK(client->get("big", in(5000)).value() == big);
  // Client-side limits fail without touching the connection.
  CHECK(client->get(std::string(5000, 'k'), in(2000)).status().code() == Code::kInvalidArgument);
  CHECK(client->set("still", "ok", in(2000)).ok());
}

TEST_CASE("store get and wait time out at their deadline", "[runtime][store]") {
  auto server = startServer();
  auto client = connectTo(*server);
  auto start = Clock::now();
  auto missing = client->get("missing", in(300));
  CHECK(missing.status().code() == Code::kTimeout);
  CHECK(msSince(start) >= 290);
  CHECK(msSince(start) < upTo(1500));
  // After a timeout the client is closed for good.
  auto later = client->set("x", "y", in(1000));
  CHECK(later.code() == Code::kIoError);
  CHECK(later.message().find("store connection closed after earlier error") != std::string::npos);

  auto other = connectTo(*server);
  start = Clock::now();
  CHECK(other->wait({"p", "q"}, in(200)).code() == Code::kTimeout);
  CHECK(msSince(start) >= 190);
  CHECK(msSince(start) < upTo(1500));
  auto third = connectTo(*server);
  CHECK(third->get("missing", in(-10)).status().code() == Code::kTimeout);  // past deadline
}

TEST_CASE("store waiters are woken by other clients", "[runtime][store]") {
  auto server = startServer();
  auto setter = connectTo(*server);
  auto waiter = connectTo(*server);
  auto getter = connectTo(*server);
  std::atomic<bool> waited{false};
  Result<std::string> got = Status(Code::kAborted, "not run");
  std::thread w([&] { waited = waiter->wait({"a", "b"}, in(5000)).ok(); });
  std::thread g([&] { got = getter->get("b", in(5000)); });
  std::this_thread::sleep_for(milliseconds(30));
  REQUIRE(setter->set("a", "1", in(2000)).ok());
  REQUIRE(setter->remove("a", in(2000)).ok());  // deleted again: the waiter must keep waiting
  REQUIRE(setter->set("b", "2", in(2000)).ok());
  g.join();
  CHECK(got.value() == "2");
  std::this_thread::sleep_for(milliseconds(30));
  CHECK_FALSE(waited.load());
  auto start = Clock::now();
  REQUIRE(setter->set("a", "3", in(2000)).ok());
  w.join();
  CHECK(waited.load());
  CHECK(msSince(start) < upTo(1000));
}

TEST_CASE("store token", "[runtime][store]") {
  StoreServerOptions options;
  options.token = "secret";
  auto server = startServer(options);
  CHECK(StoreClient::connect(addressOf(*server), "", in(2000)).status().code() ==
        Code::kPermissionDenied);
  auto wrong = StoreClient::connect(addressOf(*server), "wrong", in(2000));
  CHECK(wrong.status().code() == Code::kPermissionDenied);
  CHECK_THAT(wrong.status().message(), Catch::Contains("could not prove"));
  auto client = connectTo(*server, "secret");
  CHECK(client->set("k", "v", in(2000)).ok());
  // A raw connection that skips HELLO is refused and closed.
  RawConn raw(server->port());
  raw.send(store::encodeFrame(store::msg::Set{"k", "evil"}));
  auto [bytes, eof] = raw.readToEof(in(3000));
  CHECK(eof);
  Message reply = firstFrame(bytes);
  auto* error = std::get_if<store::msg::Error>(&reply);
  REQUIRE(error != nullptr);
  CHECK(error->code == Code::kPermissionDenied);
  CHECK(client->get("k", in(2000)).value() == "v");
}

TEST_CASE("store survives garbage, truncated and oversized frames", "[runtime][store]") {
  StoreServerOptions options;
  options.max_frame_bytes = 1024;
  auto server = startServer(options);
  auto client = connectTo(*server);
  REQUIRE(client->set("k", "v", in(2000)).ok());
  {
    RawConn raw(server->port());
    raw.send(store::encodeFrame(store::msg::Hello{}));
    raw.send(std::string("\x00\x00\x40\x00", 4));  // 4 MiB header
    auto [bytes, eof] = raw.readToEof(in(3000));
    CHECK(eof);
    CHECK_THAT(firstError(bytes).message,
               Catch::Contains("frame of 4194304 bytes exceeds the limit of 1024"));
  }
  for (const std::string& payload : {std::string("\xee"), std::string("\x03\x05\x00\x00\x00k", 6),
                                     store::encodeFrame(store::msg::Get{"k", 1}).substr(4) + "junk",
                                     store::encodeFrame(store::msg::Ok{}).substr(4)}) {
    RawConn raw(server->port());
    raw.send(frameWith(payload));
    auto [bytes, eof] = raw.readToEof(in(3000));
    CHECK(eof);
    CHECK(std::holds_alternative<store::msg::Error>(firstFrame(bytes)));
  }
  {  // a frame cut short by the peer closing
    RawConn raw(server->port());
    raw.send(std::string("\x10\x00\x00\x00\x02\x01", 6));
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 30; ++i) {
    RawConn raw(server->port());
    std::string junk(1 + rng() % 300, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    raw.send(junk);
  }
  CHECK(client->get("k", in(2000)).value() == "v");
  auto fresh = connectTo(*server);
  CHECK(fresh->get("k", in(2000)).value() == "v");
}

TEST_CASE("store answers pipelined requests in order", "[runtime][store]") {
  auto server = startServer();
  RawConn raw(server->port());
  // The parked GET holds back the requests behind it until its timeout.
  raw.send(store::encodeFrame(store::msg::Hello{}) + store::encodeFrame(store::msg::Get{"x", 50}) +
           store::encodeFrame(store::msg::Set{"y", "2"}) +
           store::encodeFrame(store::msg::Get{"y", 0}));
  std::string bytes;
  std::vector<Message> replies;
  auto until = in(3000);
  while (replies.size() < 4 && store::waitReady(raw.fd(), POLLIN, until).ok()) {
    char buf[256];
    ssize_t n = ::recv(raw.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    REQUIRE(n != 0);
    if (n > 0) bytes.append(buf, static_cast<size_t>(n));
    store::FrameReader reader(1024);
    reader.append(bytes.data(), bytes.size());
    replies.clear();
    std::string payload;
    while (reader.next(&payload).value()) replies.push_back(store::decodePayload(payload).value());
  }
  REQUIRE(replies.size() == 4);
  CHECK(std::holds_alternative<store::msg::Ok>(replies[0]));
  CHECK(std::holds_alternative<store::msg::Timeout>(replies[1]));
  CHECK(std::holds_alternative<store::msg::Ok>(replies[2]));
  CHECK(std::get<store::msg::Value>(replies[3]).value == "2");
}

TEST_CASE("store serves many concurrent clients", "[runtime][store]") {
  auto server = startServer();
  constexpr int kClients = 24;
  constexpr int kAdds = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(kClients);
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto client = StoreClient::connect(addressOf(*server), "", in(10000));
      if (!client.ok()) return void(++failures);
      for (int i = 0; i < kAdds; ++i) {
        if (!(*client)->add("counter", 1, in(10000)).ok()) ++failures;
      }
      if (!(*client)->set("done/" + std::to_string(t), "1", in(10000)).ok()) ++failures;
      std::string next = "done/" + std::to_string((t + 1) % kClients);
      if (!(*client)->get(next, in(10000)).ok()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
  auto client = connectTo(*server);
  CHECK(client->get("counter", in(2000)).value() == std::to_string(kClients * kAdds));
}

TEST_CASE("store refuses connections beyond max_connections", "[runtime][store]") {
  StoreServerOptions options;
  options.max_connections = 2;
  auto server = startServer(options);
  auto a = connectTo(*server);
  auto b = connectTo(*server);
  auto refused = StoreClient::connect(addressOf(*server), "", in(2000));
  CHECK(refused.status().code() == Code::kUnavailable);
  a.reset();
  // The server notices the close asynchronously; a retry soon succeeds.
  Result<std::unique_ptr<StoreClient>> again = Status(Code::kAborted, "not tried");
  for (int i = 0; i < 100 && !again.ok(); ++i) {
    again = StoreClient::connect(addressOf(*server), "", in(2000));
    if (!again.ok()) std::this_thread::sleep_for(milliseconds(10));
  }
  CHECK(again.ok());
}

TEST_CASE("store connect retries until the server listens, and times out", "[runtime][store]") {
  uint16_t port = 0;
  {
    auto probe = startServer();
    port = probe->port();
  }
  auto start = Clock::now();
  auto none = StoreClient::connect(StoreAddress{"127.0.0.1", port}, "", in(200));
  CHECK(none.status().code() == Code::kTimeout);
  CHECK(msSince(start) < upTo(1500));
  Result<std::unique_ptr<StoreClient>> late = Status(Code::kAborted, "not run");
  std::thread t([&] {
    late = StoreClient::connect(StoreAddress{"127.0.0.1", port}, "", in(5000));
  });
  std::this_thread::sleep_for(milliseconds(100));
  StoreServerOptions options;
  options.port = port;
  auto server = startServer(options);
  t.join();
  CHECK(late.ok());
}

TEST_CASE("member join validation", "[runtime][store]") {
  StoreServerOptions options = worldStore(3);
  auto server = startServer(options);
  auto joinError = [&](const char* world, int size, int rank) {
    auto r = MemberLink::join(addressOf(*server), "", world, size, rank, in(2000));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    return r.status().message();
  };
  auto one = joinAs(*server, 1);
  CHECK(one->heartbeatTimeout() == milliseconds(1000));
  CHECK(one->heartbeatInterval() == milliseconds(100));
  CHECK_THAT(joinError("w1", 2, 1), Catch::Contains("world 'w1' has size 3, member rank 1 says 2"));
  CHECK_THAT(joinError("w2", 3, 0), Catch::Contains("'w1'") && Catch::Contains("'w2'"));
  CHECK_THAT(joinError("w1", 3, 5),
             Catch::Contains("rank 5 is out of range for world 'w1' of size 3"));
  CHECK_THAT(joinError("w1", 3, -1), Catch::Contains("rank -1 is out of range"));
  CHECK_THAT(joinError("w1", 3, 1), Catch::Contains("rank 1 already joined world 'w1'"));
  // Members must agree on the heartbeat timeout (rank 0's store holds the world's).
  auto r500 = MemberLink::join(addressOf(*server), "", "w1", 3, 2, in(2000), milliseconds(500));
  REQUIRE_FALSE(r500.ok());
  CHECK(r500.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r500.status().message(),
             Catch::Contains("heartbeat_timeout 1000 ms") && Catch::Contains("says 500 ms"));
  auto agreeing =
      MemberLink::join(addressOf(*server), "", "w1", 3, 2, in(2000), milliseconds(1000));
  CHECK(agreeing.ok());
  auto client = connectTo(*server);
  CHECK(client->get("mw/member/1", in(2000)).value() == "1");

  auto plain = startServer();
  auto r = MemberLink::join(addressOf(*plain), "", "w1", 3, 0, in(2000));
  CHECK(r.status().code() == Code::kInvalidUsage);
}

TEST_CASE("member death is announced to the others", "[runtime][store]") {
  StoreServerOptions options = worldStore(3);
  auto server = startServer(options);
  auto zero = joinAs(*server, 0);
  auto one = joinAs(*server, 1);
  auto two = joinAs(*server, 2);
  formAll({zero.get(), one.get(), two.get()});  // the world has formed
  auto start = Clock::now();
  two.reset();  // closes the socket as a process exit would
  auto notice = awaitNotice(*zero, {zero.get(), one.get()}, in(2000));
  REQUIRE(notice.ok());
  CHECK(msSince(start) < upTo(250));
  CHECK(notice->rank == 2);
  CHECK(notice->cause == Cause::kPeerDied);
  CHECK_THAT(notice->detail, Catch::Contains("connection to rank 2 closed"));
  auto client = connectTo(*server);
  CHECK_THAT(client->get("mw/broken", in(2000)).value(), Catch::Contains("rank 2"));
  // The rank may join again on a new connection.
  auto again = joinAs(*server, 2);
}

TEST_CASE("a silent member is declared lost on time", "[runtime][store]") {
  StoreServerOptions options = worldStore(2, milliseconds(200));
  auto server = startServer(options);
  auto zero = joinAs(*server, 0, "w1", 2);
  auto one = joinAs(*server, 1, "w1", 2);
  formAll({zero.get(), one.get()});
  auto joined = Clock::now();
  REQUIRE(zero->heartbeatInterval() == milliseconds(20));
  auto notice = awaitNotice(*zero, {zero.get()}, in(3000));  // rank 1 never heartbeats
  auto elapsed = msSince(joined);
  REQUIRE(notice.ok());
  CHECK(notice->rank == 1);
  CHECK(notice->cause == Cause::kPeerSilent);
  CHECK_THAT(notice->detail, Catch::Contains("rank 1 silent for"));
  CHECK(elapsed >= 180);
  CHECK(elapsed <= upTo(450));
  // The silent member's old link is closed; it learns so from readNotices.
  Status closed = Status::Ok();
  for (auto until = in(2000); closed.ok() && Clock::now() < until;) {
    one->sendHeartbeat().ignore();
    closed = one->readNotices().status();
    std::this_thread::sleep_for(milliseconds(5));
  }
  CHECK(closed.code() == Code::kIoError);
  // rank 0 kept heartbeating and is still a member: a duplicate join is refused.
  auto dup = MemberLink::join(addressOf(*server), "", "w1", 2, 0, in(2000));
  CHECK_THAT(dup.status().message(), Catch::Contains("rank 0 already joined"));
}

TEST_CASE("reportBroken reaches the other members", "[runtime][store]") {
  StoreServerOptions options = worldStore(3);
  auto server = startServer(options);
  auto zero = joinAs(*server, 0);
  auto one = joinAs(*server, 1);
  formAll({zero.get(), one.get()});
  REQUIRE(one->reportBroken(Cause::kOpTimeout, "all_reduce timed out").ok());
  auto notice = awaitNotice(*zero, {zero.get(), one.get()}, in(2000));
  REQUIRE(notice.ok());
  CHECK(notice->rank == 1);
  CHECK(notice->cause == Cause::kRemoteBroken);
  CHECK(notice->detail == "rank 1: all_reduce timed out");
  // The reporter's link stays open and hears no notice about itself.
  auto own = one->readNotices();
  REQUIRE(own.ok());
  CHECK(own->empty());
  CHECK(one->sendHeartbeat().ok());
  // A report sent just before the process exits is still delivered, then the death.
  auto two = joinAs(*server, 2);
  formAll({two.get()});
  REQUIRE(two->reportBroken(Cause::kInjected, "last words").ok());
  two.reset();
  NoticeReader reader(*zero);
  auto first = reader.next({zero.get(), one.get()}, in(2000));
  auto second = reader.next({zero.get(), one.get()}, in(2000));
  REQUIRE((first.ok() && second.ok()));
  CHECK(first->rank == 2);
  CHECK(first->cause == Cause::kRemoteBroken);
  CHECK(first->detail == "rank 2: last words");
  CHECK(second->rank == 2);
  CHECK(second->cause == Cause::kPeerDied);
}

TEST_CASE("server stop closes member links and is idempotent", "[runtime][store]") {
  StoreServerOptions options = worldStore(3);
  auto server = startServer(options);
  auto zero = joinAs(*server, 0);
  auto client = connectTo(*server);
  auto before = zero->lastHeard();
  std::thread other([&] { server->stop(); });
  server->stop();
  other.join();
  server->stop();
  auto notice = awaitNotice(*zero, {}, in(2000));
  CHECK(notice.status().code() == Code::kIoError);
  CHECK(zero->lastHeard() >= before);
  CHECK(zero->sendHeartbeat().code() == Code::kIoError);
  CHECK(client->set("k", "v", in(1000)).code() == Code::kIoError);
  server.reset();  // the destructor after stop is fine
}

TEST_CASE("store start/stop cycles leak no descriptors", "[runtime][store]") {
  StoreServerOptions bad;
  bad.world_size = 2;  // no name
  CHECK(StoreServer::start(bad).status().code() == Code::kInvalidArgument);
  int before = test::openFds();
  for (int i = 0; i < 200; ++i) {
    auto server = startServer();
    if (i % 10 == 0) {
      auto client = connectTo(*server);
      REQUIRE(client->set("k", "v", in(2000)).ok());
    }
    if (i % 2 == 0) server->stop();
  }
  CHECK(test::openFds() == before);
}

}  // namespace
}  // namespace mw
