#include "multiworld/status.h"

#include <sstream>

namespace mw {

const char* codeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kInvalidUsage:
      return "invalid_usage";
    case Code::kNotFound:
      return "not_found";
    case Code::kTimeout:
      return "timeout";
    case Code::kRemoteError:
      return "remote_error";
    case Code::kWorldBroken:
      return "world_broken";
    case Code::kAborted:
      return "aborted";
    case Code::kBackendError:
      return "backend_error";
    case Code::kIoError:
      return "io_error";
    case Code::kPermissionDenied:
      return "permission_denied";
    case Code::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

const char* causeName(Cause cause) {
  switch (cause) {
    case Cause::kNone:
      return "none";
    case Cause::kPeerDied:
      return "peer_died";
    case Cause::kPeerSilent:
      return "peer_silent";
    case Cause::kOpTimeout:
      return "op_timeout";
    case Cause::kBackendError:
      return "backend_error";
    case Cause::kStoreLost:
      return "store_lost";
    case Cause::kProtocolError:
      return "protocol_error";
    case Cause::kInjected:
      return "injected";
    case Cause::kRemoteBroken:
      return "remote_broken";
    case Cause::kPeerLeft:
      return "peer_left";
  }
  return "unknown";
}

Result<Cause> parseCause(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(Cause::kPeerLeft); ++c) {
    if (name == causeName(static_cast<Cause>(c))) return static_cast<Cause>(c);
  }
  return Status(Code::kInvalidArgument, "unknown cause '" + std::string(name) + "'");
}

Status Status::worldBroken(const BrokenInfo& info) {
  std::ostringstream msg;
  msg << "world '" << info.world << "' is broken (" << causeName(info.cause);
  if (info.peer_rank >= 0) msg << ", rank " << info.peer_rank;
  msg << ")";
  if (!info.detail.empty()) msg << ": " << info.detail;
  Status s(Code::kWorldBroken, msg.str());
  s.broken_ = info;
  return s;
}

std::string Status::toString() const {
  if (ok()) return "ok";
  return std::string(codeName(code_)) + ": " + message_;
}

}  // namespace mw
