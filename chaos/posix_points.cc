#include "chaos/posix_points.h"

namespace mw::chaos {

const std::vector<PosixPoint>& posixPoints() {
  static const std::vector<PosixPoint> kPoints = {
      {"posix/io/rw/writev", "Gloo's writes: every tensor a world sends"},
      {"posix/io/net/recv", "Gloo's reads, and the store's (client, server, member links)"},
      {"posix/io/net/send", "the store's writes: requests, replies, heartbeats"},
      {"posix/io/net/connect", "every new connection: store clients and Gloo pairs (joining)"},
      {"posix/io/net/accept", "the store server and Gloo's listeners (others joining)"},
      {"posix/io/net/socket", "every new socket"},
  };
  return kPoints;
}

bool isPosixPoint(const std::string& name) {
  for (const char* p : {"posix/", "libc/", "linux/"}) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::string checkPosixPoint(const std::string& name) {
  for (const auto& p : posixPoints()) {
    if (name == p.name) return "";
  }
  std::string list;
  for (const auto& p : posixPoints()) list += std::string(list.empty() ? "" : ", ") + p.name;
  std::string why = "POSIX point '" + name + "' is not offered";
  if (name.find('*') != std::string::npos) {
    why += " (no wildcards: posix/io/net/* would take poll(2) and the control fifo with it)";
  } else if (name.rfind("posix/io/rw/", 0) == 0 || name.rfind("posix/io/net/poll", 0) == 0 ||
             name.rfind("posix/io/net/select", 0) == 0) {
    why +=
        " (the worker's control fifo and its reports to the harness go through it: failing it "
        "would cut the harness off from the worker)";
  }
  return why + "; POSIX points: " + list;
}

}  // namespace mw::chaos
