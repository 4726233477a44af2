#include "chaos/fifo_control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace mw::chaos {

namespace {

bool isFifo(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

std::string err(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

}  // namespace

FifoControl::~FifoControl() {
  if (in_ >= 0) ::close(in_);
  if (out_ >= 0) ::close(out_);
}

FifoControl::FifoControl(FifoControl&& o) noexcept
    : in_(o.in_), out_(o.out_), pending_(std::move(o.pending_)) {
  o.in_ = o.out_ = -1;
}

FifoControl& FifoControl::operator=(FifoControl&& o) noexcept {
  if (this != &o) {
    if (in_ >= 0) ::close(in_);
    if (out_ >= 0) ::close(out_);
    in_ = o.in_;
    out_ = o.out_;
    pending_ = std::move(o.pending_);
    o.in_ = o.out_ = -1;
  }
  return *this;
}

Result<FifoControl> FifoControl::open(const std::string& in_path, Deadline deadline) {
  const std::string suffix = ".in";
  if (in_path.size() <= suffix.size() ||
      in_path.compare(in_path.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return Status(Code::kInvalidArgument,
                  "failpoint fifo path '" + in_path + "' does not end in .in");
  }
  const std::string out_path = in_path.substr(0, in_path.size() - suffix.size()) + ".out";
  FifoControl c;
  // Until libfiu's thread has opened ".in" for reading, a non-blocking open for writing fails
  // with ENXIO.
  for (;;) {
    // Never through a link, and only a fifo: a regular file or a device of that name would take
    // the commands meant for libfiu.
    c.in_ = ::open(in_path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (c.in_ >= 0) {
      if (!isFifo(c.in_)) {
        return Status(Code::kInvalidArgument, "failpoint fifo " + in_path + " is not a fifo");
      }
      break;
    }
    int e = errno;
    if (e != ENXIO && e != ENOENT) {
      return Status(Code::kIoError, "opening failpoint fifo " + in_path + ": " + err(e));
    }
    if (Clock::now() >= deadline) {
      return Status(Code::kTimeout,
                    "failpoint fifo " + in_path + " has no reader (" + err(e) + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  c.out_ = ::open(out_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (c.out_ < 0) {
    return Status(Code::kIoError, "opening failpoint fifo " + out_path + ": " + err(errno));
  }
  if (!isFifo(c.out_)) {
    return Status(Code::kInvalidArgument, "failpoint fifo " + out_path + " is not a fifo");
  }
  // libfiu's thread opens ".out" only after ".in": removing the name before it did would make its
  // open fail and end the thread. A reply to a harmless command proves it has both open (it
  // answers -1: that point was never enabled).
  Status hello = c.command("disable name=mw/harness/handshake", deadline);
  if (!hello.ok() && hello.code() != Code::kRemoteError) {
    return Status(hello.code(), "failpoint fifo " + in_path + ": " + hello.message());
  }
  // Both ends are open: the names are no longer needed by anyone.
  ::unlink(in_path.c_str());
  ::unlink(out_path.c_str());
  return c;
}

Status FifoControl::command(const std::string& line, Deadline deadline) {
  if (in_ < 0) return Status(Code::kInvalidUsage, "failpoint fifo is not open");
  const std::string msg = line + "\n";
  size_t done = 0;
  while (done < msg.size()) {
    ssize_t n = ::write(in_, msg.data() + done, msg.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN)
      return Status(Code::kIoError, "writing to the failpoint fifo: " + err(errno));
    if (Clock::now() >= deadline) return Status(Code::kTimeout, "failpoint fifo is full");
    pollfd p{in_, POLLOUT, 0};
    ::poll(&p, 1, 1);
  }
  for (;;) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string reply = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (reply == "0") return Status::Ok();
      return Status(Code::kRemoteError, "libfiu answered '" + reply + "' to '" + line + "'");
    }
    auto left = remaining(deadline).count();
    if (left <= 0)
      return Status(Code::kTimeout, "no reply from the failpoint fifo to '" + line + "'");
    pollfd p{out_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
    if (r < 0 && errno != EINTR)
      return Status(Code::kIoError, "polling the failpoint fifo: " + err(errno));
    if (r <= 0) continue;
    char buf[256];
    ssize_t n = ::read(out_, buf, sizeof(buf));
    if (n > 0) {
      pending_.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      return Status(Code::kIoError, "the failpoint fifo closed (the worker is gone)");
    }
  }
}

std::string enableCommand(const std::string& point, int failnum, uintptr_t failinfo,
                          double probability, bool once) {
  std::string c = (probability < 1.0 ? "enable_random" : "enable");
  c += " name=" + point + ",failnum=" + std::to_string(failnum) +
       ",failinfo=" + std::to_string(failinfo);
  if (probability < 1.0) {
    char p[32];
    std::snprintf(p, sizeof(p), "%.6f", probability);
    c += ",probability=" + std::string(p);
  }
  if (once) c += ",onetime";
  return c;
}

std::string disableCommand(const std::string& point) { return "disable name=" + point; }

}  // namespace mw::chaos
