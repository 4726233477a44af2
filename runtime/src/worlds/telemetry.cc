#include "worlds/telemetry.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/thread_name.h"
#include "multiworld/failpoints.h"
#include "multiworld/telemetry.h"
#include "multiworld/telemetry_lines.h"

namespace mw::detail {

namespace lines = mw::telemetry_lines;

int64_t monotonicNs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

namespace {

// The application metrics of the process (multiworld/telemetry.h): kept only while a Telemetry
// exists; reported by the oldest one alive (`reporter`).
struct AppMetrics {
  std::atomic<int> channels{0};
  Mutex mu;
  // By the window each amount was reported in: the windows of the first channel opened while
  // none was open; taken by the reporter.
  WindowRing<MetricSums> sums;
  WindowRing<CheckSums> checks;                           // the same windows as sums
  std::vector<const Telemetry*> alive MW_GUARDED_BY(mu);  // oldest first
};

AppMetrics& appMetrics() {
  static auto* m = new AppMetrics();  // never destroyed: reportMetric may run at exit
  return *m;
}

}  // namespace

std::unique_ptr<Telemetry> Telemetry::fromEnvironment(Source& source) {
  const char* fd_text = std::getenv("MW_TELEMETRY_FD");
  if (fd_text == nullptr || *fd_text == '\0') return nullptr;
  char* end = nullptr;
  errno = 0;
  const long fd = std::strtol(fd_text, &end, 10);
  if (errno != 0 || *end != '\0' || fd < 0 || fd > 1 << 20 || ::fcntl(fd, F_GETFD) < 0) {
    std::fprintf(stderr,
                 "multiworld: MW_TELEMETRY_FD='%s' is not an open file descriptor; no telemetry "
                 "is reported\n",
                 fd_text);
    return nullptr;
  }
  std::vector<std::string> worlds;
  if (const char* list = std::getenv("MW_TELEMETRY_WORLDS")) {
    std::string rest = list;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      std::string name = rest.substr(0, comma);
      if (!name.empty()) worlds.push_back(name);
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    }
  }
  openFailpointsIfAsked(static_cast<int>(fd));
  return std::make_unique<Telemetry>(source, static_cast<int>(fd), std::move(worlds));
}

namespace {

// One line in one write (see Telemetry::write); false when the descriptor no longer takes any.
bool writeLine(int fd, const std::string& text) {
  const std::string line = text + "\n";
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void Telemetry::openFailpointsIfAsked(int fd) {
  const char* prefix = std::getenv("MW_FAILPOINT_FIFO");
  if (prefix == nullptr || *prefix == '\0') return;
  static std::once_flag once;
  std::call_once(once, [&] {
    if (!failpoints::compiledIn()) {
      writeLine(fd, lines::format(lines::Fifo{}));
      return;
    }
    if (const char* seed = std::getenv("MW_FAILPOINT_SEED")) {
      failpoints::seed(static_cast<uint32_t>(std::strtoul(seed, nullptr, 10))).ignore();
    }
    auto path = failpoints::openControl(prefix);
    writeLine(fd, path.ok() ? lines::format(lines::Fifo{*path})
                            : lines::format(
                                  lines::Error{"failpoint control: " + path.status().toString()}));
  });
}

Telemetry::Telemetry(Source& source, int fd, std::vector<std::string> ready_worlds,
                     std::chrono::milliseconds window)
    : source_(source),
      fd_(fd),
      ready_worlds_(std::move(ready_worlds)),
      window_(window),
      origin_(Clock::now()),
      events_(source.subscribe()),
      thread_([this](std::stop_token st) { run(st); }) {
  // Known from the start: a world of the role that never comes up still has its windows.
  for (const auto& w : ready_worlds_) counters(w);
  AppMetrics& app = appMetrics();
  MutexLock lock(app.mu);
  if (app.alive.empty()) {
    app.sums.start(origin_, window_);
    app.checks.start(origin_, window_);
  }
  app.alive.push_back(this);
  app.channels.fetch_add(1, std::memory_order_relaxed);
}

Telemetry::~Telemetry() {
  thread_.request_stop();
  thread_.join();
  AppMetrics& app = appMetrics();
  MutexLock lock(app.mu);
  std::erase(app.alive, this);
  app.channels.fetch_sub(1, std::memory_order_relaxed);
}

std::shared_ptr<TrafficWindows> Telemetry::counters(const std::string& name) {
  MutexLock lock(mu_);
  auto& c = counters_[name];
  if (!c) {
    c = std::make_shared<TrafficWindows>();
    c->start(origin_, window_);
  }
  return c;
}

void Telemetry::write(const std::string& text) {
  // One write per line: lines of several managers (or threads) on one pipe never interleave
  // below PIPE_BUF (4096 bytes); a longer event detail may. A failed write means the harness is
  // gone: the program goes on without reports.
  if (!broken_ && !writeLine(fd_, text)) broken_ = true;
}

void Telemetry::checkReady() {
  if (ready_) return;
  // A world counts once its `created` line is out, not merely once it is healthy: a world turns
  // healthy a moment before its event reaches the queue, and `ready` must follow every world's
  // `created` (seen beside two CPU hogs: ready, then the second world's created).
  const auto up = [&](const std::string& w) {
    return created_.count(w) > 0 && source_.worldState(w).second;
  };
  bool all = !ready_worlds_.empty();
  for (const auto& w : ready_worlds_) all = all && up(w);
  if (ready_worlds_.empty()) {
    for (const auto& w : created_) all = all || up(w);
  }
  if (!all) return;
  ready_ = true;
  write(lines::format(lines::Ready{monotonicNs(Clock::now())}));
}

void Telemetry::report(Clock::time_point window_end, Clock::time_point stamp) {
  std::vector<std::pair<std::string, std::shared_ptr<TrafficWindows>>> all;
  {
    MutexLock lock(mu_);
    all.assign(counters_.begin(), counters_.end());
  }
  for (const auto& [name, c] : all) {
    const WindowCounts w = c->takeThrough(window_end);
    write(lines::format(lines::Metrics{monotonicNs(stamp), name, source_.worldState(name).first,
                                       w.bytes, w.ops, w.lat_sum_ns, w.lat_max_ns}));
  }
  MetricSums app_window;
  CheckSums check_window;
  {
    AppMetrics& app = appMetrics();
    MutexLock lock(app.mu);
    if (app.alive.empty() || app.alive.front() != this) return;  // another manager reports them
    app_window = app.sums.takeThrough(window_end);
    check_window = app.checks.takeThrough(window_end);
  }
  for (const auto& [name, v] : app_window.sums)
    write(lines::format(lines::App{monotonicNs(stamp), name, v}));
  for (const auto& [name, c] : check_window.checks) {
    write(
        lines::format(lines::Check{monotonicNs(stamp), name, c.passed, c.failed, c.first_failure}));
  }
}

}  // namespace mw::detail

namespace mw {

Status checkMetricName(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return Status(Code::kInvalidArgument,
                  "name must have 1 to 64 characters, not " + std::to_string(name.size()));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) {
      return Status(Code::kInvalidArgument,
                    "name '" + std::string(name) +
                        "' may hold only the characters A-Z a-z 0-9 _ . - (one word)");
    }
  }
  return Status::Ok();
}

Status reportMetric(std::string_view name, double amount) {
  if (Status s = checkMetricName(name); !s.ok()) {
    return Status(Code::kInvalidArgument, "reportMetric: " + s.message());
  }
  if (!std::isfinite(amount)) {
    return Status(Code::kInvalidArgument,
                  "reportMetric: amount for '" + std::string(name) + "' is not finite");
  }
  detail::AppMetrics& app = detail::appMetrics();
  if (app.channels.load(std::memory_order_relaxed) == 0) return Status::Ok();
  const Clock::time_point at = Clock::now();
  MutexLock lock(app.mu);  // orders the add after the ring's start
  app.sums.add(at, [&](MetricSums& w) { w.sums[std::string(name)] += amount; });
  return Status::Ok();
}

Status reportCheck(std::string_view name, bool ok, std::string_view detail) {
  if (Status s = checkMetricName(name); !s.ok()) {
    return Status(Code::kInvalidArgument, "reportCheck: " + s.message());
  }
  detail::AppMetrics& app = detail::appMetrics();
  if (app.channels.load(std::memory_order_relaxed) == 0) return Status::Ok();
  const Clock::time_point at = Clock::now();
  constexpr size_t kDetail = 200;
  MutexLock lock(app.mu);  // orders the add after the ring's start
  app.checks.add(at, [&](CheckSums& w) {
    CheckSums::Counts& c = w.checks[std::string(name)];
    if (ok) {
      ++c.passed;
      return;
    }
    if (c.failed++ == 0) c.first_failure = std::string(detail.substr(0, kDetail));
  });
  return Status::Ok();
}

}  // namespace mw

namespace mw::detail {

void Telemetry::run(std::stop_token stop) {
  nameThisThread("mw-telemetry");
  auto next = origin_ + window_;
  for (;;) {
    const bool stopping = stop.stop_requested();
    // Events until the window ends (all of those queued, once stopping).
    while (auto e = events_->next(stopping ? Clock::now() : next)) {
      std::string detail = e->broken ? e->broken->detail : std::string();
      if (e->kind == WorldEvent::Kind::kCreated) {
        counters(e->world);
        detail = source_.joinedWith(e->world, e->generation);
        created_.insert(e->world);
      }
      write(lines::format(lines::Event{monotonicNs(e->at), e->world, e->kind, e->generation,
                                       e->broken ? e->broken->cause : Cause::kNone,
                                       e->broken ? e->broken->peer_rank : -1, detail}));
      checkReady();
      if (!stopping && Clock::now() >= next) break;
    }
    checkReady();
    // Every window that has ended, each with its own counts: a thread that woke late writes the
    // windows it missed one after another (multiworld/traffic_windows.h).
    const Clock::time_point now = Clock::now();
    for (; next <= now; next += window_) report(next, next);
    if (stopping) {
      report(next, now);  // the part of the current window until now, and the last counts
      return;
    }
  }
}

}  // namespace mw::detail
