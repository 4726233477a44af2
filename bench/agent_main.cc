// The agent role of mw_bench: a worker process that obeys the leader's commands (see agent.h).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <thread>
#include <vector>

#include "agent.h"
#include "bench_util.h"
#include "raw_baselines.h"

namespace mwb {

namespace {

// Serves the leader's commands in order. Thread rules: run() on the agent's main thread; the
// threads of `stream` commands only send, and stop once their world is removed (quit, EOF).
class AgentServer {
 public:
  explicit AgentServer(int fd) : fd_(fd), comm_(manager_) {}
  ~AgentServer() { stopAll(); }

  int run();

 private:
  bool readLine(std::string& line);
  void answer(const std::string& line);
  // Runs one command; returns its answer. Throws on malformed input or failures.
  std::string dispatch(const std::vector<std::string>& w);
  std::string join(const std::vector<std::string>& w);
  std::string send(const std::vector<std::string>& w);
  std::string allreduce(const std::string& world, size_t count, long iters, bool check);
  std::string stream(const std::vector<std::string>& w);
  std::string glooAllreduce(size_t count, long iters, bool check);
  std::string paired(const std::vector<std::string>& w, bool allreduce);
  float* pattern(size_t count);
  float* zeros(size_t count);
  void stopAll();

  int fd_;
  std::string buffered_;
  mw::WorldManager manager_;
  mw::Communicator comm_;
  std::vector<float> pattern_;
  std::vector<float> zeros_;
  std::unique_ptr<RawGloo> gloo_;
  std::unique_ptr<TcpLink> tcp_;
  std::vector<std::jthread> streams_;  // stop once their worlds are removed
};

long num(const std::vector<std::string>& w, size_t i) {
  if (i >= w.size()) throw BenchError("missing argument " + std::to_string(i));
  return std::stol(w[i]);
}

std::string tensorWorld(const std::vector<std::string>& w, size_t i) {
  if (i >= w.size()) throw BenchError("missing world name");
  return w[i];
}

bool AgentServer::readLine(std::string& line) {
  for (;;) {
    auto nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return true;
    }
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void AgentServer::answer(const std::string& line) {
  std::string msg = line + "\n";
  (void)!::send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL);
}

float* AgentServer::pattern(size_t count) {
  if (pattern_.size() < count) {
    pattern_.resize(count);
    fillPattern(pattern_.data(), count);
  }
  return pattern_.data();
}

float* AgentServer::zeros(size_t count) {
  if (zeros_.size() < count) zeros_.resize(count, 0.0f);
  return zeros_.data();
}

std::string AgentServer::join(const std::vector<std::string>& w) {
  mw::WorldOptions o;
  o.name = tensorWorld(w, 1);
  o.rank = static_cast<int>(num(w, 2));
  o.size = static_cast<int>(num(w, 3));
  o.store.port = static_cast<uint16_t>(num(w, 4));
  o.heartbeat_timeout = std::chrono::milliseconds(num(w, 5));
  const auto t0 = Clock::now();
  expectOk(manager_.initWorld(o, mw::deadlineIn(std::chrono::seconds(20))), "join " + o.name);
  const auto t1 = Clock::now();
  // The steady clock is CLOCK_MONOTONIC, comparable across processes of one Linux host.
  return "ok " + std::to_string(millis(t1 - t0)) + " " +
         std::to_string(
             std::chrono::duration_cast<std::chrono::nanoseconds>(t1.time_since_epoch()).count());
}

std::string AgentServer::send(const std::vector<std::string>& w) {
  const std::string world = tensorWorld(w, 1);
  const int dst = static_cast<int>(num(w, 2));
  const size_t count = static_cast<size_t>(num(w, 3)) / sizeof(float);
  const long iters = num(w, 4);
  auto t = mw::Tensor::cpu(pattern(count), count);
  for (long i = 0; i < iters; ++i) expectOk(comm_.send(world, t, dst), "send in " + world);
  return "done";
}

std::string AgentServer::allreduce(const std::string& world, size_t count, long iters, bool check) {
  float* p = zeros(count);
  if (check) std::fill(p, p + count, 2.0f);
  auto t = mw::Tensor::cpu(p, count);
  for (long i = 0; i < iters; ++i) expectOk(comm_.allReduce(world, t).wait(), "all_reduce");
  if (check) {
    bool good = std::all_of(p, p + count, [](float x) { return x == 3.0f; });
    std::fill(p, p + count, 0.0f);
    if (!good) throw BenchError("all_reduce result is not 1+2 everywhere");
  }
  return check ? "ok" : "done";
}

std::string AgentServer::glooAllreduce(size_t count, long iters, bool check) {
  if (!gloo_) throw BenchError("no raw gloo context");
  float* p = zeros(count);
  if (check) std::fill(p, p + count, 2.0f);
  gloo_->allreduce(p, count, iters);
  if (check) {
    bool good = std::all_of(p, p + count, [](float x) { return x == 3.0f; });
    std::fill(p, p + count, 0.0f);
    if (!good) throw BenchError("raw gloo allreduce result is not 1+2 everywhere");
  }
  return check ? "ok" : "done";
}

// "paired-allreduce WORLD COUNT N" / "paired-send WORLD DST BYTES N": N operations alternating
// between the runtime and raw Gloo in the order pairedUsesGloo() gives, the leader doing the same.
std::string AgentServer::paired(const std::vector<std::string>& w, bool allreduce) {
  if (!gloo_) throw BenchError("no raw gloo context");
  const std::string world = tensorWorld(w, 1);
  const size_t count =
      allreduce ? static_cast<size_t>(num(w, 2)) : static_cast<size_t>(num(w, 3)) / sizeof(float);
  const int dst = allreduce ? -1 : static_cast<int>(num(w, 2));
  const long n = num(w, allreduce ? 3 : 4);
  float* p = allreduce ? zeros(count) : pattern(count);
  auto t = mw::Tensor::cpu(p, count);
  for (long i = 0; i < n; ++i) {
    if (allreduce) {
      if (pairedUsesGloo(i)) {
        gloo_->allreduce(p, count, 1);
      } else {
        expectOk(comm_.allReduce(world, t).wait(), "all_reduce");
      }
    } else if (pairedUsesGloo(i)) {
      gloo_->send(p, count * sizeof(float), dst, 1);
    } else {
      expectOk(comm_.send(world, t, dst), "send in " + world);
    }
  }
  return "done";
}

std::string AgentServer::stream(const std::vector<std::string>& w) {
  const std::string world = tensorWorld(w, 1);
  const int dst = static_cast<int>(num(w, 2));
  const size_t count = static_cast<size_t>(num(w, 3)) / sizeof(float);
  streams_.emplace_back([this, world, dst, count](std::stop_token st) {
    std::vector<float> buf(count);
    fillPattern(buf.data(), count);
    auto t = mw::Tensor::cpu(buf.data(), count);
    while (!st.stop_requested() && comm_.send(world, t, dst).ok()) {
    }
  });
  return "ok";
}

std::string AgentServer::dispatch(const std::vector<std::string>& w) {
  const std::string& c = w[0];
  if (c == "join") return join(w);
  if (c == "leave") {
    expectOk(manager_.removeWorld(tensorWorld(w, 1)), "leave");
    return "ok";
  }
  if (c == "send") return send(w);
  if (c == "allreduce") return allreduce(tensorWorld(w, 1), num(w, 2), num(w, 3), false);
  if (c == "allreduce-check") return allreduce(tensorWorld(w, 1), num(w, 2), 1, true);
  if (c == "stream") return stream(w);
  if (c == "paired-allreduce") return paired(w, true);
  if (c == "paired-send") return paired(w, false);
  if (c == "gloo-init") {
    if (w.size() < 5) throw BenchError("gloo-init DIR PREFIX RANK SIZE");
    gloo_ = RawGloo::connect(w[1], w[2], static_cast<int>(num(w, 3)), static_cast<int>(num(w, 4)));
    return "ok";
  }
  if (c == "gloo-send") {
    if (!gloo_) throw BenchError("no raw gloo context");
    size_t bytes = static_cast<size_t>(num(w, 2));
    gloo_->send(pattern(bytes / sizeof(float)), bytes, static_cast<int>(num(w, 1)), num(w, 3));
    return "done";
  }
  if (c == "gloo-allreduce") return glooAllreduce(num(w, 1), num(w, 2), false);
  if (c == "gloo-allreduce-check") return glooAllreduce(num(w, 1), 1, true);
  if (c == "tcp-connect") {
    tcp_ = TcpLink::connect(static_cast<uint16_t>(num(w, 1)));
    return "ok";
  }
  if (c == "tcp-send") {
    if (!tcp_) throw BenchError("no tcp link");
    size_t bytes = static_cast<size_t>(num(w, 1));
    tcp_->send(pattern(bytes / sizeof(float)), bytes, num(w, 2));
    return "done";
  }
  throw BenchError("unknown command '" + c + "'");
}

void AgentServer::stopAll() {
  for (const auto& info : manager_.worlds()) manager_.removeWorld(info.name).ignore();
  for (auto& t : streams_) t.request_stop();
  streams_.clear();  // joins; their sends failed when the worlds went away
  gloo_.reset();
  tcp_.reset();
}

int AgentServer::run() {
  for (std::string line; readLine(line);) {
    std::vector<std::string> words;
    std::istringstream in(line);
    for (std::string x; in >> x;) words.push_back(x);
    if (words.empty()) continue;
    if (words[0] == "quit") break;
    try {
      answer(dispatch(words));
    } catch (const std::exception& e) {
      std::string why = e.what();
      for (char& ch : why) {
        if (ch == '\n') ch = ' ';
      }
      answer("err " + words[0] + ": " + why);
    }
  }
  stopAll();
  return 0;
}

}  // namespace

int agentMain(int fd) {
  AgentServer server(fd);
  return server.run();
}

}  // namespace mwb
