// StoreClient: blocking request/reply over one connection. GET and WAIT tell the server how long
// they may wait; the client itself waits for the reply until the deadline plus a small grace, so
// the server's TIMEOUT reply (the normal way a wait ends) arrives before the client gives up.
#include <array>
#include <cerrno>

#include "base/failpoint.h"
#include "base/mutex.h"
#include "multiworld/store.h"
#include "store/member_link.h"
#include "store/socket.h"
#include "store/wire.h"

namespace mw {
namespace store {
namespace {

constexpr std::chrono::milliseconds kReplyGrace{200};

Status checkKey(const std::string& key) {
  if (key.size() <= kMaxKeyBytes) return Status::Ok();
  return Status(Code::kInvalidArgument,
                "store key of " + std::to_string(key.size()) + " bytes exceeds the limit of 4096");
}

Status checkKeys(const std::vector<std::string>& keys) {
  if (keys.size() > kMaxWaitKeys) {
    return Status(Code::kInvalidArgument,
                  std::to_string(keys.size()) + " keys in one call exceed the limit of 4096");
  }
  for (const auto& key : keys) MW_RETURN_IF_ERROR(checkKey(key));
  return Status::Ok();
}

Status checkValue(size_t bytes) {
  // Leave room for the key and the header within the default server bound.
  if (bytes + 2 * kMaxKeyBytes + 64 <= kDefaultMaxFrameBytes) return Status::Ok();
  return Status(Code::kInvalidArgument,
                "store value of " + std::to_string(bytes) + " bytes exceeds the frame limit");
}

int64_t timeoutMs(Deadline deadline) { return remaining(deadline).count(); }

template <typename T>
Result<T> expect(Result<Message> reply, const char* request) {
  if (!reply.ok()) return reply.status();
  if (auto* v = std::get_if<T>(&*reply)) return std::move(*v);
  return Status(Code::kIoError,
                std::string("store answered ") + request + " with " + msgTypeName(typeOf(*reply)));
}

enum Call { kSet, kGet, kWait, kCheck, kAdd, kCompareSet, kDelete, kNumCalls };
constexpr const char* kCallNames[kNumCalls] = {"set", "get",         "wait",  "check",
                                               "add", "compare_set", "delete"};

class Client final : public StoreClient {
 public:
  Client(StoreAddress address, Fd fd, const std::string& scope)
      : address_(std::move(address)), fd_(std::move(fd)) {
    for (int c = 0; c < kNumCalls; ++c) {
      failpoints_[c] = detail::FailPoint(std::string("mw/store/") + kCallNames[c], scope);
    }
  }

  // Sends `request` and returns the reply; kTimeout/kIoError close the connection for good.
  Result<Message> call(Call which, const Message& request, Deadline deadline) {
    MutexLock lock(mu_);
    if (!fd_.valid()) {
      return Status(Code::kIoError, "store connection closed after earlier error: " + closed_why_);
    }
    auto injected = failpoints_[which].check();
    // As if the exchange had failed on the socket: ETIMEDOUT reads as the deadline passing.
    Result<Message> reply =
        injected ? Result<Message>(
                       Status(injected->failnum == ETIMEDOUT ? Code::kTimeout : Code::kIoError,
                              std::string(kCallNames[which]) + ": " +
                                  detail::errnoText(injected->failnum) + injected->suffix()))
                 : exchange(request, deadline);
    if (reply.ok() && std::holds_alternative<msg::Timeout>(*reply)) {
      reply = Status(Code::kTimeout, std::get<msg::Timeout>(*reply).message);
    } else if (reply.ok() && std::holds_alternative<msg::Error>(*reply)) {
      auto& error = std::get<msg::Error>(*reply);
      return Status(error.code, "store " + address_.str() + ": " + error.message);
    }
    if (reply.ok()) return reply;
    Status s = reply.status();
    Code code = s.code() == Code::kTimeout ? Code::kTimeout : Code::kIoError;
    closed_why_ = s.message();
    fd_.reset();
    return Status(code, "store " + address_.str() + ": " + s.message());
  }

  Status set(const std::string& key, const std::string& value, Deadline deadline) override {
    MW_RETURN_IF_ERROR(checkKey(key));
    MW_RETURN_IF_ERROR(checkValue(value.size()));
    return expect<msg::Ok>(call(kSet, msg::Set{key, value}, deadline), "SET").status();
  }
  Result<std::string> get(const std::string& key, Deadline deadline) override {
    MW_RETURN_IF_ERROR(checkKey(key));
    auto v = expect<msg::Value>(call(kGet, msg::Get{key, timeoutMs(deadline)}, deadline), "GET");
    if (!v.ok()) return v.status();
    return std::move(v->value);
  }
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override {
    MW_RETURN_IF_ERROR(checkKeys(keys));
    return expect<msg::Ok>(call(kWait, msg::Wait{keys, timeoutMs(deadline)}, deadline), "WAIT")
        .status();
  }
  Result<bool> check(const std::vector<std::string>& keys, Deadline deadline) override {
    MW_RETURN_IF_ERROR(checkKeys(keys));
    auto v = expect<msg::Bool>(call(kCheck, msg::Check{keys}, deadline), "CHECK");
    if (!v.ok()) return v.status();
    return v->value;
  }
  Result<int64_t> add(const std::string& key, int64_t delta, Deadline deadline) override {
    MW_RETURN_IF_ERROR(checkKey(key));
    auto v = expect<msg::Int>(call(kAdd, msg::Add{key, delta}, deadline), "ADD");
    if (!v.ok()) return v.status();
    return v->value;
  }
  Result<std::string> compareSet(const std::string& key, bool expected_absent,
                                 const std::string& expected, const std::string& desired,
                                 Deadline deadline) override {
    MW_RETURN_IF_ERROR(checkKey(key));
    MW_RETURN_IF_ERROR(checkValue(expected.size() + desired.size()));
    msg::CompareSet request{key, expected_absent, expected, desired};
    auto v = expect<msg::Value>(call(kCompareSet, request, deadline), "COMPARE_SET");
    if (!v.ok()) return v.status();
    return std::move(v->value);
  }
  Result<bool> remove(const std::string& key, Deadline deadline) override {
    MW_RETURN_IF_ERROR(checkKey(key));
    auto v = expect<msg::Bool>(call(kDelete, msg::Delete{key}, deadline), "DELETE");
    if (!v.ok()) return v.status();
    return v->value;
  }

 private:
  // REQUIRES: fd_ valid.
  Result<Message> exchange(const Message& request, Deadline deadline) MW_REQUIRES(mu_) {
    Deadline io_deadline =
        deadline > Deadline::max() - kReplyGrace ? Deadline::max() : deadline + kReplyGrace;
    MW_RETURN_IF_ERROR(sendAll(fd_.get(), encodeFrame(request), io_deadline));
    auto payload = recvFrame(fd_.get(), kMaxReplyBytes, io_deadline);
    if (!payload.ok()) return payload.status();
    return decodePayload(*payload);
  }

  const StoreAddress address_;
  std::array<detail::FailPoint, kNumCalls> failpoints_;
  Mutex mu_;
  Fd fd_ MW_GUARDED_BY(mu_);  // invalid after a timeout or I/O error
  std::string closed_why_ MW_GUARDED_BY(mu_);
};

}  // namespace

}  // namespace store

Result<std::unique_ptr<StoreClient>> StoreClient::connect(const StoreAddress& address,
                                                          const std::string& token,
                                                          Deadline deadline,
                                                          const std::string& failpoint_scope) {
  auto fd = store::connectAndGreet(address, token, deadline);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<StoreClient>(
      std::make_unique<store::Client>(address, std::move(*fd), failpoint_scope));
}

Result<std::unique_ptr<StoreClient>> connectMemberClient(const StoreAddress& address,
                                                         const std::string& token,
                                                         const std::string& world, int size,
                                                         int rank, Deadline deadline,
                                                         const std::string& failpoint_scope) {
  store::Message reply;
  auto fd = store::connectAsMember(address, token, store::msg::MemberClient{world, size, rank},
                                   deadline, &reply);
  if (fd.ok() && !std::holds_alternative<store::msg::Ok>(reply)) {
    fd = Status(Code::kIoError, std::string("unexpected ") +
                                    store::msgTypeName(store::typeOf(reply)) +
                                    " reply to MEMBER_CLIENT");
  }
  if (!fd.ok()) {
    return Status(fd.status().code(), "connecting the key-value client of rank " +
                                          std::to_string(rank) + " of world '" + world +
                                          "' to store " + address.str() + ": " +
                                          fd.status().message());
  }
  return std::unique_ptr<StoreClient>(
      std::make_unique<store::Client>(address, std::move(*fd), failpoint_scope));
}

}  // namespace mw
