#include "store/wire.h"

#include <array>
#include <cstring>
#include <utility>

namespace mw::store {
namespace {

constexpr size_t kMaxNonceBytes = 64;  // nonces and proofs on the wire

constexpr std::array<MsgType, std::variant_size_v<Message>> kTypes = {
    MsgType::kHello,      MsgType::kSet,          MsgType::kGet,        MsgType::kWait,
    MsgType::kCheck,      MsgType::kAdd,          MsgType::kCompareSet, MsgType::kDelete,
    MsgType::kMemberJoin, MsgType::kHeartbeat,    MsgType::kBroken,     MsgType::kAuth,
    MsgType::kFormed,     MsgType::kMemberClient, MsgType::kOk,         MsgType::kValue,
    MsgType::kBool,       MsgType::kInt,          MsgType::kTimeout,    MsgType::kError,
    MsgType::kJoinOk,     MsgType::kPing,         MsgType::kNotice,     MsgType::kChallenge};

// Appends fields to a payload.
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void i64(int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void strs(const std::vector<std::string>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

void put(Writer& w, const msg::Hello& m) {
  w.i64(m.version);
  w.str(m.client_nonce);
}
void put(Writer& w, const msg::Auth& m) { w.str(m.client_proof); }
void put(Writer&, const msg::Formed&) {}
void put(Writer& w, const msg::MemberClient& m) {
  w.str(m.world);
  w.i64(m.size);
  w.i64(m.rank);
}
void put(Writer& w, const msg::Challenge& m) {
  w.str(m.server_nonce);
  w.str(m.server_proof);
}
void put(Writer& w, const msg::Set& m) {
  w.str(m.key);
  w.str(m.value);
}
void put(Writer& w, const msg::Get& m) {
  w.str(m.key);
  w.i64(m.timeout_ms);
}
void put(Writer& w, const msg::Wait& m) {
  w.strs(m.keys);
  w.i64(m.timeout_ms);
}
void put(Writer& w, const msg::Check& m) { w.strs(m.keys); }
void put(Writer& w, const msg::Add& m) {
  w.str(m.key);
  w.i64(m.delta);
}
void put(Writer& w, const msg::CompareSet& m) {
  w.str(m.key);
  w.u8(m.expected_absent ? 1 : 0);
  w.str(m.expected);
  w.str(m.desired);
}
void put(Writer& w, const msg::Delete& m) { w.str(m.key); }
void put(Writer& w, const msg::MemberJoin& m) {
  w.str(m.world);
  w.i64(m.size);
  w.i64(m.rank);
  w.i64(m.heartbeat_timeout_ms);
}
void put(Writer&, const msg::Heartbeat&) {}
void put(Writer& w, const msg::Broken& m) {
  w.u8(static_cast<uint8_t>(m.cause));
  w.str(m.detail);
}
void put(Writer&, const msg::Ok&) {}
void put(Writer& w, const msg::Value& m) { w.str(m.value); }
void put(Writer& w, const msg::Bool& m) { w.u8(m.value ? 1 : 0); }
void put(Writer& w, const msg::Int& m) { w.i64(m.value); }
void put(Writer& w, const msg::Timeout& m) { w.str(m.message); }
void put(Writer& w, const msg::Error& m) {
  w.u8(static_cast<uint8_t>(m.code));
  w.str(m.message);
}
void put(Writer& w, const msg::JoinOk& m) {
  w.i64(m.heartbeat_interval_ms);
  w.i64(m.heartbeat_timeout_ms);
}
void put(Writer&, const msg::Ping&) {}
void put(Writer& w, const msg::Notice& m) {
  w.i64(m.rank);
  w.u8(static_cast<uint8_t>(m.cause));
  w.str(m.detail);
}

// Reads fields of one payload; the first failure is kept and later reads return zero values.
class Reader {
 public:
  Reader(std::string_view data, const char* type) : data_(data), type_(type) {}

  uint8_t u8(const char* field) {
    if (!need(1, field)) return 0;
    return static_cast<uint8_t>(data_[pos_++]);
  }
  uint32_t u32(const char* field) {
    if (!need(4, field)) return 0;
    uint32_t v = loadU32(data_.data() + pos_);
    pos_ += 4;
    return v;
  }
  int64_t i64(const char* field) {
    if (!need(8, field)) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(data_[pos_ + i]);
    pos_ += 8;
    return static_cast<int64_t>(v);
  }
  std::string str(const char* field, size_t limit = SIZE_MAX) {
    uint32_t size = u32(field);
    if (!error_.empty()) return {};
    if (size > limit) {
      fail(std::string(field) + " of " + std::to_string(size) + " bytes exceeds limit " +
           std::to_string(limit));
      return {};
    }
    if (!need(size, field)) return {};
    std::string s(data_.substr(pos_, size));
    pos_ += size;
    return s;
  }
  std::vector<std::string> keys() {
    uint32_t count = u32("key count");
    if (!error_.empty()) return {};
    if (count > kMaxWaitKeys) {
      fail(std::to_string(count) + " keys exceed limit " + std::to_string(kMaxWaitKeys));
      return {};
    }
    std::vector<std::string> v;
    for (uint32_t i = 0; i < count && error_.empty(); ++i) v.push_back(str("key", kMaxKeyBytes));
    return v;
  }
  Code code() {
    uint8_t c = u8("code");
    if (error_.empty() && (c == 0 || c > static_cast<uint8_t>(Code::kUnavailable))) {
      fail("unknown status code " + std::to_string(c));
    }
    return static_cast<Code>(c);
  }
  Cause cause() {
    uint8_t c = u8("cause");
    if (error_.empty() && c > static_cast<uint8_t>(Cause::kPeerLeft)) {
      fail("unknown cause " + std::to_string(c));
    }
    return static_cast<Cause>(c);
  }
  bool flag(const char* field) {
    uint8_t b = u8(field);
    if (error_.empty() && b > 1) fail(std::string(field) + " flag is " + std::to_string(b));
    return b == 1;
  }
  // OK when every field was read and nothing trails them.
  Status finish() {
    if (error_.empty() && pos_ != data_.size()) {
      fail(std::to_string(data_.size() - pos_) + " trailing bytes");
    }
    if (error_.empty()) return Status::Ok();
    return Status(Code::kRemoteError, std::string("malformed ") + type_ + " frame: " + error_);
  }

 private:
  bool need(size_t n, const char* field) {
    if (!error_.empty()) return false;
    if (data_.size() - pos_ >= n) return true;
    fail("truncated " + std::string(field) + " (need " + std::to_string(n) + " bytes at offset " +
         std::to_string(pos_) + ", " + std::to_string(data_.size() - pos_) + " left)");
    return false;
  }
  void fail(std::string what) {
    if (error_.empty()) error_ = std::move(what);
  }

  std::string_view data_;
  const char* type_;
  size_t pos_ = 1;  // after the type byte
  std::string error_;
};

Message decodeRequest(MsgType type, Reader& r) {
  switch (type) {
    case MsgType::kHello: {
      msg::Hello m;
      m.version = r.i64("version");
      m.client_nonce = r.str("client_nonce", kMaxNonceBytes);
      return m;
    }
    case MsgType::kSet: {
      msg::Set m;
      m.key = r.str("key", kMaxKeyBytes);
      m.value = r.str("value");
      return m;
    }
    case MsgType::kGet: {
      msg::Get m;
      m.key = r.str("key", kMaxKeyBytes);
      m.timeout_ms = r.i64("timeout");
      return m;
    }
    case MsgType::kWait: {
      msg::Wait m;
      m.keys = r.keys();
      m.timeout_ms = r.i64("timeout");
      return m;
    }
    case MsgType::kCheck:
      return msg::Check{r.keys()};
    case MsgType::kAdd: {
      msg::Add m;
      m.key = r.str("key", kMaxKeyBytes);
      m.delta = r.i64("delta");
      return m;
    }
    case MsgType::kCompareSet: {
      msg::CompareSet m;
      m.key = r.str("key", kMaxKeyBytes);
      m.expected_absent = r.flag("expected_absent");
      m.expected = r.str("expected");
      m.desired = r.str("desired");
      return m;
    }
    default:
      return msg::Delete{r.str("key", kMaxKeyBytes)};
  }
}

Message decodeMember(MsgType type, Reader& r) {
  switch (type) {
    case MsgType::kMemberJoin: {
      msg::MemberJoin m;
      m.world = r.str("world", kMaxKeyBytes);
      m.size = r.i64("size");
      m.rank = r.i64("rank");
      m.heartbeat_timeout_ms = r.i64("heartbeat_timeout_ms");
      return m;
    }
    case MsgType::kHeartbeat:
      return msg::Heartbeat{};
    case MsgType::kAuth:
      return msg::Auth{r.str("client_proof", kMaxNonceBytes)};
    case MsgType::kFormed:
      return msg::Formed{};
    case MsgType::kMemberClient: {
      msg::MemberClient m;
      m.world = r.str("world", kMaxKeyBytes);
      m.size = r.i64("size");
      m.rank = r.i64("rank");
      return m;
    }
    default: {
      msg::Broken m;
      m.cause = r.cause();
      m.detail = r.str("detail");
      return m;
    }
  }
}

Message decodeReply(MsgType type, Reader& r) {
  switch (type) {
    case MsgType::kOk:
      return msg::Ok{};
    case MsgType::kValue:
      return msg::Value{r.str("value")};
    case MsgType::kBool:
      return msg::Bool{r.flag("value")};
    case MsgType::kInt:
      return msg::Int{r.i64("value")};
    case MsgType::kTimeout:
      return msg::Timeout{r.str("message")};
    case MsgType::kError: {
      msg::Error m;
      m.code = r.code();
      m.message = r.str("message");
      return m;
    }
    case MsgType::kJoinOk: {
      msg::JoinOk m;
      m.heartbeat_interval_ms = r.i64("heartbeat_interval");
      m.heartbeat_timeout_ms = r.i64("heartbeat_timeout");
      return m;
    }
    case MsgType::kPing:
      return msg::Ping{};
    case MsgType::kChallenge: {
      msg::Challenge m;
      m.server_nonce = r.str("server_nonce", kMaxNonceBytes);
      m.server_proof = r.str("server_proof", kMaxNonceBytes);
      return m;
    }
    default: {
      msg::Notice m;
      m.rank = r.i64("rank");
      m.cause = r.cause();
      m.detail = r.str("detail");
      return m;
    }
  }
}

}  // namespace

uint32_t loadU32(const char* data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

const char* msgTypeName(MsgType type) {
  switch (type) {
    case MsgType::kHello:
      return "HELLO";
    case MsgType::kSet:
      return "SET";
    case MsgType::kGet:
      return "GET";
    case MsgType::kWait:
      return "WAIT";
    case MsgType::kCheck:
      return "CHECK";
    case MsgType::kAdd:
      return "ADD";
    case MsgType::kCompareSet:
      return "COMPARE_SET";
    case MsgType::kDelete:
      return "DELETE";
    case MsgType::kMemberJoin:
      return "MEMBER_JOIN";
    case MsgType::kHeartbeat:
      return "HEARTBEAT";
    case MsgType::kBroken:
      return "BROKEN";
    case MsgType::kAuth:
      return "AUTH";
    case MsgType::kFormed:
      return "FORMED";
    case MsgType::kMemberClient:
      return "MEMBER_CLIENT";
    case MsgType::kOk:
      return "OK";
    case MsgType::kValue:
      return "VALUE";
    case MsgType::kBool:
      return "BOOL";
    case MsgType::kInt:
      return "INT";
    case MsgType::kTimeout:
      return "TIMEOUT";
    case MsgType::kError:
      return "ERROR";
    case MsgType::kJoinOk:
      return "JOIN_OK";
    case MsgType::kPing:
      return "PING";
    case MsgType::kNotice:
      return "NOTICE";
    case MsgType::kChallenge:
      return "CHALLENGE";
  }
  return "UNKNOWN";
}

MsgType typeOf(const Message& message) { return kTypes[message.index()]; }

std::string encodeFrame(const Message& message) {
  Writer w;
  w.u32(0);  // patched below
  w.u8(static_cast<uint8_t>(typeOf(message)));
  std::visit([&w](const auto& m) { put(w, m); }, message);
  std::string& out = w.out();
  auto length = static_cast<uint32_t>(out.size() - kFrameHeaderBytes);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return std::move(out);
}

std::string encodeValueFrame(std::string_view value) {
  Writer w;
  w.out().reserve(kFrameHeaderBytes + 1 + 4 + value.size());
  w.u32(static_cast<uint32_t>(1 + 4 + value.size()));
  w.u8(static_cast<uint8_t>(MsgType::kValue));
  w.u32(static_cast<uint32_t>(value.size()));
  w.out().append(value);
  return std::move(w.out());
}

Result<Message> decodePayload(std::string_view payload) {
  if (payload.empty()) return Status(Code::kRemoteError, "malformed frame: empty payload");
  auto type = static_cast<MsgType>(static_cast<uint8_t>(payload[0]));
  const char* name = msgTypeName(type);
  if (std::strcmp(name, "UNKNOWN") == 0) {
    return Status(Code::kRemoteError, "malformed frame: unknown message type " +
                                          std::to_string(static_cast<uint8_t>(payload[0])));
  }
  Reader r(payload, name);
  Message m;
  if (type <= MsgType::kDelete) {
    m = decodeRequest(type, r);
  } else if (type <= MsgType::kMemberClient) {
    m = decodeMember(type, r);
  } else {
    m = decodeReply(type, r);
  }
  MW_RETURN_IF_ERROR(r.finish());
  return m;
}

void FrameReader::append(const char* data, size_t size) {
  // Compact once the consumed prefix dominates, so the buffer never grows without bound.
  if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(data, size);
}

Status FrameReader::checkLength(uint32_t length) const {
  if (length == 0) return Status(Code::kRemoteError, "malformed frame: zero length");
  if (length > max_frame_bytes_) {
    return Status(Code::kRemoteError, "frame of " + std::to_string(length) +
                                          " bytes exceeds the limit of " +
                                          std::to_string(max_frame_bytes_) + " bytes");
  }
  return Status::Ok();
}

Result<bool> FrameReader::next(std::string* payload) {
  if (buffered() < kFrameHeaderBytes) return false;
  uint32_t length = loadU32(buffer_.data() + offset_);
  MW_RETURN_IF_ERROR(checkLength(length));
  if (buffered() - kFrameHeaderBytes < length) return false;
  payload->assign(buffer_, offset_ + kFrameHeaderBytes, length);
  offset_ += kFrameHeaderBytes + length;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  return true;
}

bool FrameReader::ready() const {
  if (buffered() < kFrameHeaderBytes) return false;
  uint32_t length = loadU32(buffer_.data() + offset_);
  return !checkLength(length).ok() || buffered() - kFrameHeaderBytes >= length;
}

}  // namespace mw::store
