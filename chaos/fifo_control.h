// FifoControl: the harness's side of libfiu's remote control fifos (docs/failpoints.md).
//
// A worker creates "<prefix>-<pid>.in/.out" (mw::failpoints::openControl); the harness opens both
// once, then unlinks them, so nothing is left on disk whatever happens to either process. Each
// command is one line in and one reply line out, read with a deadline.
//
// Thread rules: one thread at a time.
#pragma once

#include <chrono>
#include <string>

#include "multiworld/status.h"

namespace mw::chaos {

class FifoControl {
 public:
  FifoControl() = default;
  ~FifoControl();
  FifoControl(FifoControl&& o) noexcept;
  FifoControl& operator=(FifoControl&& o) noexcept;
  FifoControl(const FifoControl&) = delete;
  FifoControl& operator=(const FifoControl&) = delete;

  // Opens the fifos whose ".in" path is `in_path` (the ".out" path is derived), retrying until
  // libfiu's thread listens or `deadline` passes, exchanges one harmless command to be sure it has
  // both ends open, and unlinks both. kIoError / kTimeout.
  static Result<FifoControl> open(const std::string& in_path, Deadline deadline);

  // Sends one command line (no newline) and waits for the reply until `deadline`. OK when libfiu
  // answered 0; kRemoteError with the reply otherwise; kTimeout; kIoError when the fifo broke.
  Status command(const std::string& line, Deadline deadline);

  bool isOpen() const { return in_ >= 0; }

 private:
  int in_ = -1;   // we write commands
  int out_ = -1;  // we read replies
  std::string pending_;
};

// "enable name=P,failnum=F[,failinfo=I][,onetime]" or "enable_random ...,probability=X".
std::string enableCommand(const std::string& point, int failnum, uintptr_t failinfo,
                          double probability, bool once);
std::string disableCommand(const std::string& point);

}  // namespace mw::chaos
