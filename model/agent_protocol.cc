// The host agent protocol's codec: each message's fields are listed once (fields()), and one
// visitor writes them, another reads them with their types checked.
#include "model/agent_protocol.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "model/net_words.h"
#include "multiworld/config.h"

#ifndef MW_BUILD_ID
#define MW_BUILD_ID "unknown"
#endif

namespace mw::agent {

using json = nlohmann::json;

std::string buildId() { return std::string(MW_VERSION) + "+" + MW_BUILD_ID; }

namespace {

// ---- Each message's fields, once ----

template <class V>
void fields(V& v, PortRange& m) {
  v("first", m.first);
  v("last", m.last);
}
template <class V>
void fields(V& v, CpuUse& m) {
  v("role", m.role);
  v("cpu_ns", m.cpu_ns);
  v("wait_ns", m.wait_ns);
}
template <class V>
void fields(V& v, Hello& m) {
  v("version", m.version);
  v("build", m.build);
  v("lease_ms", m.lease_ms);
  v("exempt", m.exempt);
}
template <class V>
void fields(V&, Ping&) {}
template <class V>
void fields(V& v, Spawn& m) {
  v("role", m.role);
  v("argv", m.argv);
  v("env", m.env);
  v("cwd", m.cwd);
  v("executable", m.executable);
  v("telemetry", m.telemetry);
  v("meter", m.meter);
}
template <class V>
void fields(V& v, Signal& m) {
  v("role", m.role);
  v("sig", m.sig);
}
template <class V>
void fields(V& v, Tell& m) {
  v("role", m.role);
  v("line", m.line);
}
template <class V>
void fields(V& v, CloseStdin& m) {
  v("role", m.role);
}
template <class V>
void fields(V& v, Kill& m) {
  v("role", m.role);
}
template <class V>
void fields(V& v, Release& m) {
  v("role", m.role);
}
template <class V>
void fields(V& v, MakeDir& m) {
  v("role", m.role);
}
template <class V>
void fields(V& v, FifoOpen& m) {
  v("role", m.role);
  v("path", m.path);
  v("timeout_ms", m.timeout_ms);
}
template <class V>
void fields(V& v, FifoCommand& m) {
  v("role", m.role);
  v("command", m.command);
  v("timeout_ms", m.timeout_ms);
}
template <class V>
void fields(V& v, Net& m) {
  v("op", m.op);
  v("peers", m.peers);
  v("loud", m.loud);
  v("p", m.p);
  v("rate", m.rate);
  v("delay_ms", m.delay_ms);
  v("jitter_ms", m.jitter_ms);
  v("dev", m.dev);
}
template <class V>
void fields(V&, ClockRead&) {}
template <class V>
void fields(V&, Sample&) {}
template <class V>
void fields(V&, Bye&) {}
template <class V>
void fields(V& v, HelloReply& m) {
  v("version", m.version);
  v("build", m.build);
  v("host", m.host);
  v("pid", m.pid);
  v("boot_id", m.boot_id);
  v("facts", m.facts);
}
template <class V>
void fields(V& v, Reply& m) {
  v("code", m.code);
  v("why", m.why);
  v("pid", m.pid);
  v("ends", m.ends);
  v("t_ns", m.t_ns);
  v("took_ns", m.took_ns);
  v("count", m.count);
  v("path", m.path);
  v("cpu", m.cpu);
}
template <class V>
void fields(V& v, Output& m) {
  v("role", m.role);
  v("stream", m.stream);
  v("data", m.data);
}
template <class V>
void fields(V& v, Eof& m) {
  v("role", m.role);
  v("stream", m.stream);
}
template <class V>
void fields(V& v, Exit& m) {
  v("role", m.role);
  v("text", m.text);
  v("code", m.code);
  v("signal", m.signal);
  v("t_ns", m.t_ns);
}

// The names, in Message's order.
constexpr const char* kNames[] = {"hello",        "ping",  "spawn",   "signal", "tell",
                                  "close_stdin",  "kill",  "release", "mkdir",  "fifo_open",
                                  "fifo_command", "net",   "clock",   "sample", "bye",
                                  "hello_reply",  "reply", "output",  "eof",    "exit"};
static_assert(std::size(kNames) == std::variant_size_v<Message>);

// ---- Writing ----

struct Writer {
  json& j;
  template <class T>
  void operator()(const char* name, T& value) {
    if constexpr (std::is_same_v<T, Code>) {
      j[name] = codeName(value);
    } else if constexpr (std::is_same_v<T, std::vector<PortRange>> ||
                         std::is_same_v<T, std::vector<CpuUse>>) {
      json a = json::array();
      for (auto& e : value) {
        json o = json::object();
        Writer w{o};
        fields(w, e);
        a.push_back(std::move(o));
      }
      j[name] = std::move(a);
    } else {
      j[name] = value;
    }
  }
};

// ---- Reading ----

struct BadFrame {
  std::string why;
};

struct Reader {
  const json& j;
  std::string where;  // "spawn" or "hello.exempt[2]"

  [[noreturn]] void bad(const char* name, const char* want) const {
    throw BadFrame{where + ": field '" + name + "' " + want};
  }
  const json& need(const char* name) const {
    auto it = j.find(name);
    if (it == j.end()) throw BadFrame{where + ": field '" + name + "' is missing"};
    return *it;
  }
  void operator()(const char* name, std::string& v) {
    const json& x = need(name);
    if (!x.is_string()) bad(name, "is not a string");
    v = x.get<std::string>();
  }
  void operator()(const char* name, bool& v) {
    const json& x = need(name);
    if (!x.is_boolean()) bad(name, "is not true or false");
    v = x.get<bool>();
  }
  void operator()(const char* name, double& v) {
    const json& x = need(name);
    if (!x.is_number()) bad(name, "is not a number");
    v = x.get<double>();
  }
  template <class I>
  requires std::is_integral_v<I>
  void operator()(const char* name, I& v) {
    const json& x = need(name);
    if (!x.is_number_integer()) bad(name, "is not an integer");
    if (x.is_number_unsigned()) {
      const auto u = x.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<I>::max())) bad(name, "is out of range");
      v = static_cast<I>(u);
    } else {
      const auto s = x.get<int64_t>();
      if (s < static_cast<int64_t>(std::numeric_limits<I>::min()) ||
          s > static_cast<int64_t>(std::numeric_limits<I>::max())) {
        bad(name, "is out of range");
      }
      v = static_cast<I>(s);
    }
  }
  void operator()(const char* name, Code& v) {
    std::string s;
    (*this)(name, s);
    for (int c = 0; c <= static_cast<int>(Code::kUnavailable); ++c) {
      if (s == codeName(static_cast<Code>(c))) {
        v = static_cast<Code>(c);
        return;
      }
    }
    bad(name, ("names no status code: '" + s + "'").c_str());
  }
  void operator()(const char* name, std::vector<std::string>& v) {
    const json& x = need(name);
    if (!x.is_array()) bad(name, "is not an array of strings");
    v.clear();
    for (const json& e : x) {
      if (!e.is_string()) bad(name, "is not an array of strings");
      v.push_back(e.get<std::string>());
    }
  }
  void operator()(const char* name, std::map<std::string, std::string>& v) {
    const json& x = need(name);
    if (!x.is_object()) bad(name, "is not an object of strings");
    v.clear();
    for (auto it = x.begin(); it != x.end(); ++it) {
      if (!it.value().is_string()) bad(name, "is not an object of strings");
      v[it.key()] = it.value().get<std::string>();
    }
  }
  template <class E>
  void operator()(const char* name, std::vector<E>& v) {
    const json& x = need(name);
    if (!x.is_array()) bad(name, "is not an array of objects");
    v.clear();
    for (size_t i = 0; i < x.size(); ++i) {
      if (!x[i].is_object()) bad(name, "is not an array of objects");
      Reader r{x[i], where + "." + name + "[" + std::to_string(i) + "]"};
      E e;
      fields(r, e);
      v.push_back(std::move(e));
    }
  }
};

[[noreturn]] void refuse(const std::string& where, const std::string& why) {
  throw BadFrame{where + ": " + why};
}

// Ranges the types cannot say.
void check(const Hello& m) {
  if (m.lease_ms < 50 || m.lease_ms > 600000) refuse("hello", "lease_ms is not in 50..600000");
  for (const auto& r : m.exempt) {
    if (r.first < 1 || r.last > 65535 || r.first > r.last) {
      refuse("hello", "exempt range " + std::to_string(r.first) + "-" + std::to_string(r.last) +
                          " is not within 1..65535 in order");
    }
  }
}
void check(const Spawn& m) {
  if (m.role.empty()) refuse("spawn", "role is empty");
  if (m.argv.empty()) refuse("spawn", "argv is empty");
}
void check(const Signal& m) {
  if (m.sig < 0 || m.sig > 64) refuse("signal", "sig is not a signal number (0..64)");
}
void check(const FifoOpen& m) {
  if (m.timeout_ms < 0 || m.timeout_ms > 600000)
    refuse("fifo_open", "timeout_ms is not in 0..600000");
}
void check(const FifoCommand& m) {
  if (m.timeout_ms < 0 || m.timeout_ms > 600000) {
    refuse("fifo_command", "timeout_ms is not in 0..600000");
  }
}
void check(const Net& m) {
  if (m.op != "cut" && m.op != "loss" && m.op != "bandwidth" && m.op != "delay" &&
      m.op != "prepare" && m.op != "ready" && m.op != "heal") {
    refuse("net", "op '" + m.op + "' is none of cut, loss, bandwidth, delay, prepare, ready, heal");
  }
  if (!(m.p >= 0 && m.p <= 1)) refuse("net", "p is not in 0..1");
  // Each goes into an iptables or tc argument: plain words only (docs/hosts.md).
  for (const auto& peer : m.peers) {
    if (!harness::isPeerWord(peer)) {
      refuse("net",
             "peer '" + peer + "' is no host name or address (letters, digits, _ . : % [ ] - /)");
    }
  }
  if (!m.dev.empty() && !harness::isInterfaceName(m.dev)) {
    refuse("net", "dev '" + m.dev + "' is no interface name (1 to 15 letters, digits, _ . -)");
  }
  if (!m.rate.empty() && !harness::isTcRate(m.rate)) {
    refuse("net", "rate '" + m.rate + "' is not a tc rate (a number and a unit, like 10mbit)");
  }
  if (m.delay_ms < 0 || m.jitter_ms < 0) refuse("net", "delay_ms and jitter_ms must be >= 0");
}
void check(const Output& m) {
  if (m.stream < 1 || m.stream > 3) refuse("output", "stream is not 1, 2 or 3");
}
void check(const Eof& m) {
  if (m.stream < 1 || m.stream > 3) refuse("eof", "stream is not 1, 2 or 3");
}
template <class T>
void check(const T&) {}

template <size_t I = 0>
Message readAs(size_t index, const json& j) {
  if constexpr (I < std::variant_size_v<Message>) {
    if (I == index) {
      std::variant_alternative_t<I, Message> m;
      Reader r{j, kNames[I]};
      fields(r, m);
      check(m);
      return m;
    }
    return readAs<I + 1>(index, j);
  } else {
    throw BadFrame{"unreachable"};
  }
}

}  // namespace

const char* typeName(const Message& m) { return kNames[m.index()]; }

std::string encode(const Frame& f) {
  json j = json::object();
  j["t"] = typeName(f.msg);
  j["id"] = f.id;
  std::visit(
      [&](const auto& m) {
        auto copy = m;  // fields() takes a mutable reference for both directions
        Writer w{j};
        fields(w, copy);
      },
      f.msg);
  std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace);
  line.push_back('\n');
  return line;
}

Result<Frame> decode(std::string_view line) {
  if (line.size() >= kMaxFrameBytes) {
    return Status(Code::kInvalidArgument,
                  "agent frame: longer than " + std::to_string(kMaxFrameBytes) + " bytes");
  }
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status(Code::kInvalidArgument,
                  "agent frame: not a JSON object: '" + std::string(line.substr(0, 80)) + "'");
  }
  try {
    auto t = j.find("t");
    if (t == j.end() || !t->is_string()) {
      return Status(Code::kInvalidArgument, "agent frame: no type (field 't')");
    }
    const std::string type = t->get<std::string>();
    size_t index = std::size(kNames);
    for (size_t i = 0; i < std::size(kNames); ++i) {
      if (type == kNames[i]) index = i;
    }
    if (index == std::size(kNames)) {
      return Status(Code::kInvalidArgument, "agent frame: unknown type '" + type + "'");
    }
    Frame f;
    Reader r{j, type};
    r("id", f.id);
    f.msg = readAs(index, j);
    return f;
  } catch (const BadFrame& e) {
    return Status(Code::kInvalidArgument, "agent frame: " + e.why);
  } catch (const std::exception& e) {
    return Status(Code::kInvalidArgument, std::string("agent frame: ") + e.what());
  }
}

Status takeLines(std::string& buf, std::vector<std::string>& lines) {
  size_t start = 0;
  for (;;) {
    const size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    lines.emplace_back(buf, start, nl - start);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (buf.size() >= kMaxFrameBytes) {
    return Status(Code::kInvalidArgument,
                  "agent frame: a line longer than " + std::to_string(kMaxFrameBytes) + " bytes");
  }
  return Status::Ok();
}

Status checkPeer(int version, const std::string& build, const char* peer_name) {
  if (version == kProtocolVersion && build == buildId()) return Status::Ok();
  return Status(Code::kInvalidUsage, std::string(peer_name) + " speaks agent protocol " +
                                         std::to_string(version) + " (build " + build +
                                         "), this program protocol " +
                                         std::to_string(kProtocolVersion) + " (build " + buildId() +
                                         "): run the same build of mwchaos on every host");
}

}  // namespace mw::agent
