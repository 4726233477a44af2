#include "multiworld/telemetry_lines.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <type_traits>
#include <vector>

namespace mw::telemetry_lines {

namespace {

// The words of `line`, at most `max` of them: the last one holds the rest of the line.
std::vector<std::string_view> words(std::string_view line, size_t max) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < max) {
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) break;
    out.push_back(line.substr(0, sp));
    line.remove_prefix(sp + 1);
  }
  out.push_back(line);
  return out;
}

// Reads the fields of one line in order, remembering the first error.
class Fields {
 public:
  Fields(std::string_view kind, std::vector<std::string_view> w) : kind_(kind), w_(std::move(w)) {}

  template <class N>
  N number(const char* field) {
    N v{};
    std::string_view s = next(field);
    if (!ok()) return v;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) {
      fail(std::string(field) + " '" + std::string(s.substr(0, 40)) + "' is not a whole number");
    }
    return v;
  }
  // A finite floating-point number.
  double real(const char* field) {
    double v = 0;
    std::string_view s = next(field);
    if (!ok()) return v;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
      fail(std::string(field) + " '" + std::string(s.substr(0, 40)) + "' is not a finite number");
    }
    return v;
  }
  // A floating-point number, nan and inf included (a corrupted element's value).
  double anyReal(const char* field) {
    std::string_view s = next(field);
    if (!ok()) return 0;
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) return v;
    if (ec != std::errc() || p != s.data() + s.size()) {
      fail(std::string(field) + " '" + std::string(s.substr(0, 40)) + "' is not a number");
    }
    return v;
  }
  std::string word(const char* field) { return std::string(next(field)); }
  // The rest of the line (may be empty).
  std::string rest() { return i_ < w_.size() ? std::string(w_[i_++]) : std::string(); }

  bool ok() const { return error_.empty(); }
  Status status() const {
    return Status(Code::kInvalidArgument, "worker line '" + std::string(kind_) + "': " + error_);
  }

 private:
  std::string_view next(const char* field) {
    if (!ok()) return {};
    if (i_ >= w_.size() || w_[i_].empty()) {
      fail("missing " + std::string(field));
      return {};
    }
    return w_[i_++];
  }
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }
  std::string_view kind_;
  std::vector<std::string_view> w_;
  size_t i_ = 0;
  std::string error_;
};

std::optional<WorldEvent::Kind> parseEventKind(std::string_view name) {
  for (auto k :
       {WorldEvent::Kind::kCreated, WorldEvent::Kind::kBroken, WorldEvent::Kind::kRemoved}) {
    if (name == eventKindName(k)) return k;
  }
  return std::nullopt;
}

}  // namespace

std::string oneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

std::string format(const Line& line) {
  auto n = [](auto v) { return std::to_string(v); };
  auto real = [](double v) {  // exact: read back to the same double
    char out[32];
    std::snprintf(out, sizeof out, "%.17g", v);
    return std::string(out);
  };
  return std::visit(
      [&](const auto& l) -> std::string {
        using T = std::decay_t<decltype(l)>;
        if constexpr (std::is_same_v<T, Fifo>) {
          return "fifo " + (l.path.empty() ? std::string("-") : l.path);
        } else if constexpr (std::is_same_v<T, Ready>) {
          return "ready " + n(l.t_ns);
        } else if constexpr (std::is_same_v<T, Event>) {
          return "event " + n(l.t_ns) + " " + l.world + " " + eventKindName(l.kind) + " " +
                 n(l.generation) + " " +
                 (l.cause == Cause::kNone ? std::string("-") : causeName(l.cause)) + " " +
                 n(l.peer) + " " + oneLine(l.detail);
        } else if constexpr (std::is_same_v<T, Metrics>) {
          return "metrics " + n(l.t_ns) + " " + l.world + " " + n(l.generation) + " " + n(l.bytes) +
                 " " + n(l.ops) + " " + n(l.lat_sum_ns) + " " + n(l.lat_max_ns);
        } else if constexpr (std::is_same_v<T, Cpu>) {
          return "cpu " + n(l.t_ns) + " " + n(l.cpu_ns) + " " + n(l.wait_ns);
        } else if constexpr (std::is_same_v<T, JoinFail>) {
          return "joinfail " + n(l.t_ns) + " " + l.world + " " + oneLine(l.status);
        } else if constexpr (std::is_same_v<T, Error>) {
          return "error " + oneLine(l.message);
        } else if constexpr (std::is_same_v<T, App>) {
          return "app " + n(l.t_ns) + " " + l.name + " " + real(l.value);
        } else if constexpr (std::is_same_v<T, Check>) {
          return "check " + n(l.t_ns) + " " + l.name + " " + n(l.passed) + " " + n(l.failed) + " " +
                 oneLine(l.detail);
        } else if constexpr (std::is_same_v<T, Verified>) {
          return "verified " + n(l.t_ns) + " " + l.world + " " + n(l.ops) + " " + n(l.bytes) + " " +
                 n(l.violations);
        } else if constexpr (std::is_same_v<T, History>) {
          return "history " + n(l.start_ns) + " " + n(l.end_ns) + " " + l.world + " " +
                 n(l.generation) + " " + l.op + " " + n(l.peer) + " " + n(l.seq) + " " + l.outcome;
        } else if constexpr (std::is_same_v<T, HistoryFull>) {
          return "history_full " + n(l.t_ns);
        } else {
          static_assert(std::is_same_v<T, Violation>);
          return "violation " + n(l.t_ns) + " " + l.world + " " + n(l.generation) + " " + l.op +
                 " " + n(l.seq) + " " + n(l.offset) + " " + n(l.wrong) + " " + real(l.expected) +
                 " " + real(l.found) + " " + oneLine(l.detail);
        }
      },
      line);
}

std::string optionsText(const WorldOptions& o) {
  return std::string("backend=") + backendName(o.backend) + " device=" + o.device.str() +
         " heartbeat_ms=" + std::to_string(o.heartbeat_timeout.count()) +
         " op_timeout_ms=" + std::to_string(o.op_timeout.count());
}

Result<Line> parse(std::string_view line) {
  const size_t sp = line.find(' ');
  const std::string_view kind = line.substr(0, sp);
  const std::string_view body = sp == std::string_view::npos ? "" : line.substr(sp + 1);
  if (kind == "fifo") {
    if (body.empty()) return Status(Code::kInvalidArgument, "worker line 'fifo': missing path");
    return Line(Fifo{body == "-" ? std::string() : std::string(body)});
  }
  if (kind == "error") return Line(Error{std::string(body)});
  if (kind == "ready") {
    Fields f(kind, words(body, 1));
    Ready r{f.number<int64_t>("time")};
    if (!f.ok()) return f.status();
    return Line(r);
  }
  if (kind == "event") {
    Fields f(kind, words(body, 7));
    Event e;
    e.t_ns = f.number<int64_t>("time");
    e.world = f.word("world");
    const std::string kind_word = f.word("kind");
    e.generation = f.number<uint64_t>("generation");
    const std::string cause_word = f.word("cause");
    e.peer = f.number<int>("peer");
    e.detail = f.rest();
    if (!f.ok()) return f.status();
    auto k = parseEventKind(kind_word);
    if (!k) {
      return Status(Code::kInvalidArgument,
                    "worker line 'event': unknown kind '" + std::string(kind_word) + "'");
    }
    e.kind = *k;
    if (cause_word != "-") {
      auto c = parseCause(cause_word);
      if (!c.ok())
        return Status(Code::kInvalidArgument, "worker line 'event': " + c.status().message());
      e.cause = *c;
    }
    return Line(std::move(e));
  }
  if (kind == "metrics") {
    Fields f(kind, words(body, 7));
    Metrics m;
    m.t_ns = f.number<int64_t>("time");
    m.world = f.word("world");
    m.generation = f.number<uint64_t>("generation");
    m.bytes = f.number<int64_t>("bytes");
    m.ops = f.number<int64_t>("ops");
    m.lat_sum_ns = f.number<int64_t>("latency_sum_ns");
    m.lat_max_ns = f.number<int64_t>("latency_max_ns");
    if (!f.ok()) return f.status();
    return Line(std::move(m));
  }
  if (kind == "app") {
    Fields f(kind, words(body, 3));
    App a;
    a.t_ns = f.number<int64_t>("time");
    a.name = f.word("name");
    a.value = f.real("value");
    if (!f.ok()) return f.status();
    return Line(std::move(a));
  }
  if (kind == "check") {
    Fields f(kind, words(body, 5));
    Check c;
    c.t_ns = f.number<int64_t>("time");
    c.name = f.word("name");
    c.passed = f.number<int64_t>("passed");
    c.failed = f.number<int64_t>("failed");
    c.detail = f.rest();
    if (!f.ok()) return f.status();
    return Line(std::move(c));
  }
  if (kind == "verified") {
    Fields f(kind, words(body, 5));
    Verified v;
    v.t_ns = f.number<int64_t>("time");
    v.world = f.word("world");
    v.ops = f.number<int64_t>("ops");
    v.bytes = f.number<int64_t>("bytes");
    v.violations = f.number<int64_t>("violations");
    if (!f.ok()) return f.status();
    return Line(std::move(v));
  }
  if (kind == "violation") {
    Fields f(kind, words(body, 10));
    Violation v;
    v.t_ns = f.number<int64_t>("time");
    v.world = f.word("world");
    v.generation = f.number<uint64_t>("generation");
    v.op = f.word("op");
    v.seq = f.number<uint64_t>("seq");
    v.offset = f.number<uint64_t>("offset");
    v.wrong = f.number<uint64_t>("wrong");
    v.expected = f.anyReal("expected");
    v.found = f.anyReal("found");
    v.detail = f.rest();
    if (!f.ok()) return f.status();
    return Line(std::move(v));
  }
  if (kind == "history") {
    Fields f(kind, words(body, 8));
    History h;
    h.start_ns = f.number<int64_t>("start");
    h.end_ns = f.number<int64_t>("end");
    h.world = f.word("world");
    h.generation = f.number<uint64_t>("generation");
    h.op = f.word("op");
    h.peer = f.number<int>("peer");
    h.seq = f.number<uint64_t>("seq");
    h.outcome = f.word("outcome");
    if (!f.ok()) return f.status();
    if (h.outcome.find(' ') != std::string::npos) {
      return Status(Code::kInvalidArgument, "worker line 'history': more than 8 fields");
    }
    return Line(std::move(h));
  }
  if (kind == "history_full") {
    Fields f(kind, words(body, 1));
    HistoryFull h{f.number<int64_t>("time")};
    if (!f.ok()) return f.status();
    return Line(h);
  }
  if (kind == "cpu") {
    Fields f(kind, words(body, 3));
    Cpu c;
    c.t_ns = f.number<int64_t>("time");
    c.cpu_ns = f.number<int64_t>("cpu_ns");
    c.wait_ns = f.number<int64_t>("wait_ns");
    if (!f.ok()) return f.status();
    return Line(c);
  }
  if (kind == "joinfail") {
    Fields f(kind, words(body, 3));
    JoinFail j;
    j.t_ns = f.number<int64_t>("time");
    j.world = f.word("world");
    j.status = f.rest();
    if (!f.ok()) return f.status();
    return Line(std::move(j));
  }
  return Status(Code::kInvalidArgument,
                "worker line of unknown kind '" + std::string(kind.substr(0, 40)) + "'");
}

}  // namespace mw::telemetry_lines
