// Store wire format: message types, frame encoding and a validating, incremental decoder.
//
// A frame is `u32 length` (little-endian) followed by `length` payload bytes. The payload starts
// with a `u8` message type; the fields that follow are `u8`, `i64` (little-endian) and strings
// (`u32 length` + bytes). docs/store-protocol.md lists every message.
//
// Input is untrusted: decoding checks every length against the bytes present, the frame bound, the
// key limits, the type and the absence of trailing bytes, and reports a kRemoteError naming the
// problem. Nothing here reads out of bounds or aborts on bad input.
//
// Thread rules: free functions are thread-safe; a FrameReader is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "multiworld/status.h"

namespace mw::store {

// 3: FORMED and MEMBER_CLIENT (a member's own key-value connection) were added.
inline constexpr uint32_t kProtocolVersion = 3;
inline constexpr size_t kMaxKeyBytes = 4096;  // keys, world names and tokens
inline constexpr size_t kMaxWaitKeys = 4096;  // keys in one WAIT or CHECK
inline constexpr size_t kFrameHeaderBytes = 4;
// Bound on frames a client accepts from its server. Replies may exceed the server's request bound
// (a GET of the largest value); clients read bodies incrementally, so a bogus length costs memory
// only for bytes that really arrive.
inline constexpr size_t kMaxReplyBytes = size_t{1} << 30;

enum class MsgType : uint8_t {
  // Client -> server.
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kWait = 4,
  kCheck = 5,
  kAdd = 6,
  kCompareSet = 7,
  kDelete = 8,
  kMemberJoin = 9,
  kHeartbeat = 10,
  kBroken = 11,
  kAuth = 12,
  kFormed = 13,
  kMemberClient = 14,
  // Server -> client.
  kOk = 64,
  kValue = 65,
  kBool = 66,
  kInt = 67,
  kTimeout = 68,
  kError = 69,
  kJoinOk = 70,
  kPing = 71,
  kNotice = 72,
  kChallenge = 73,
};

// Upper-case protocol name of a type ("COMPARE_SET"), or "UNKNOWN".
const char* msgTypeName(MsgType type);

namespace msg {
struct Hello {
  int64_t version = kProtocolVersion;
  std::string client_nonce;  // auth::kNonceBytes random bytes (store/auth.h)
};
struct Set {
  std::string key;
  std::string value;
};
struct Get {
  std::string key;
  int64_t timeout_ms = 0;
};
struct Wait {
  std::vector<std::string> keys;
  int64_t timeout_ms = 0;
};
struct Check {
  std::vector<std::string> keys;
};
struct Add {
  std::string key;
  int64_t delta = 0;
};
struct CompareSet {
  std::string key;
  bool expected_absent = false;
  std::string expected;
  std::string desired;
};
struct Delete {
  std::string key;
};
struct MemberJoin {
  std::string world;
  int64_t size = 0;
  int64_t rank = 0;
  // The member's heartbeat timeout; the server refuses one that differs from its own. 0: the
  // member takes the server's (it says so in JOIN_OK).
  int64_t heartbeat_timeout_ms = 0;
};
struct Heartbeat {};
struct Broken {
  Cause cause = Cause::kNone;
  std::string detail;
};
struct Auth {
  std::string client_proof;
};
// The member's world has formed: its rendezvous completed and it is healthy (store-protocol.md,
// "Membership"). Until then the store counts neither the link's loss nor its BROKEN reports.
struct Formed {};
// Claims this key-value connection as the one of member `rank` of world `world`: it then uses
// the room a store keeps for its world's members (store-protocol.md, "Limits").
struct MemberClient {
  std::string world;
  int64_t size = 0;
  int64_t rank = 0;
};
struct Ok {};
struct Value {
  std::string value;
};
struct Bool {
  bool value = false;
};
struct Int {
  int64_t value = 0;
};
struct Timeout {
  std::string message;
};
struct Error {
  Code code = Code::kRemoteError;
  std::string message;
};
struct JoinOk {
  int64_t heartbeat_interval_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
};
struct Ping {};
struct Notice {
  int64_t rank = -1;
  Cause cause = Cause::kNone;
  std::string detail;
};
struct Challenge {
  std::string server_nonce;
  std::string server_proof;
};
}  // namespace msg

// One decoded message. The alternatives are in MsgType order.
using Message =
    std::variant<msg::Hello, msg::Set, msg::Get, msg::Wait, msg::Check, msg::Add, msg::CompareSet,
                 msg::Delete, msg::MemberJoin, msg::Heartbeat, msg::Broken, msg::Auth, msg::Formed,
                 msg::MemberClient, msg::Ok, msg::Value, msg::Bool, msg::Int, msg::Timeout,
                 msg::Error, msg::JoinOk, msg::Ping, msg::Notice, msg::Challenge>;

MsgType typeOf(const Message& message);

// The complete frame (length prefix and payload) of `message`.
std::string encodeFrame(const Message& message);
// The frame of msg::Value{value}, with the value copied once (a store's reply of a large value).
std::string encodeValueFrame(std::string_view value);

// Decodes one payload (without the length prefix). kRemoteError naming the problem when the type is
// unknown, a field is truncated, a limit is exceeded or bytes trail the last field.
Result<Message> decodePayload(std::string_view payload);

// Bound on a frame before the handshake is complete (HELLO, AUTH): memory a connection that has
// not authenticated can make the server hold.
inline constexpr size_t kMaxHandshakeFrameBytes = 256;

// Splits a byte stream into payloads without trusting it. Frames whose declared length is zero or
// above `max_frame_bytes` are reported as soon as their header arrives.
class FrameReader {
 public:
  explicit FrameReader(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  void append(const char* data, size_t size);
  // Moves the next complete payload into `*payload` and returns true; false when more bytes are
  // needed. kRemoteError (naming the size and the limit) for a bad length: the stream cannot be
  // resynchronized afterwards.
  Result<bool> next(std::string* payload);
  // True when next() would return a payload or an error without more input.
  bool ready() const;
  size_t buffered() const { return buffer_.size() - offset_; }
  // Changes the bound for frames not yet returned (a handshake's bound, then the full one).
  void setMaxFrameBytes(size_t max_frame_bytes) { max_frame_bytes_ = max_frame_bytes; }
  // Drops every buffered byte and releases the memory.
  void clear() {
    std::string().swap(buffer_);
    offset_ = 0;
  }

 private:
  Status checkLength(uint32_t length) const;

  size_t max_frame_bytes_;
  std::string buffer_;
  size_t offset_ = 0;  // bytes of buffer_ already consumed
};

// Reads the little-endian u32 at `data` (4 readable bytes).
uint32_t loadU32(const char* data);

}  // namespace mw::store
