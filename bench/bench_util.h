// Shared pieces of mw_bench: statistics, a small JSON value, flag parsing, sizes and host facts.
//
// Thread rules: everything here is a plain value or a free function; use from one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mwb {

using Clock = std::chrono::steady_clock;

// A failure that ends a benchmark run: main prints it and exits 3.
struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A command-line mistake: main prints it with the usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
inline double millis(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Order statistics of a sample (linear interpolation between closest ranks).
struct Summary {
  size_t n = 0;
  double min = 0, p10 = 0, median = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
  // A distribution-free confidence interval of the median: the order statistics (k, n+1-k) with
  // the largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is still >= 95%, or min..max
  // (coverage below 95%) when n is too small for that (n < 6). ci_level is the coverage reached.
  double ci_lo = 0, ci_hi = 0, ci_level = 0;
};
Summary summarize(std::vector<double> samples);
double percentile(const std::vector<double>& sorted, double p);

// A JSON value: null, bool, number, string, array or object (keys kept in insertion order).
class Json {
 public:
  Json() = default;
  Json(bool b) : kind_(Kind::kBool), bool_(b) {}                     // NOLINT: implicit
  Json(double d) : kind_(Kind::kNumber), num_(d) {}                  // NOLINT: implicit
  Json(int i) : Json(static_cast<double>(i)) {}                      // NOLINT: implicit
  Json(long i) : Json(static_cast<double>(i)) {}                     // NOLINT: implicit
  Json(unsigned long i) : Json(static_cast<double>(i)) {}            // NOLINT: implicit
  Json(const char* s) : kind_(Kind::kString), str_(s) {}             // NOLINT: implicit
  Json(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}  // NOLINT: implicit
  Json(const std::vector<double>& v);                                // NOLINT: implicit
  static Json object();
  static Json array();

  // REQUIRES: an object. Replaces an existing key.
  Json& set(const std::string& key, Json value);
  // REQUIRES: an array.
  Json& push(Json value);
  std::string dump() const;

 private:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  void dumpTo(std::string& out, int indent) const;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double num_ = 0;
  std::string str_;
  std::vector<std::string> keys_;
  std::vector<Json> items_;
};

// {"n","min","p10","median","p90","p99","max","mean"}.
Json toJson(const Summary& s);
// {"samples": [...], plus toJson(summarize(samples))}.
Json sampleJson(const std::vector<double>& samples);

// Writes `doc` to `path` (nothing when path is empty). Throws BenchError when it cannot.
void writeJson(const std::string& path, const Json& doc);

// CPU time (seconds, nanosecond resolution) that processes `pids` and all their threads have run
// so far: the sum of the first field of /proc/<pid>/task/*/schedstat. Threads that have exited
// are not counted, so take differences over windows in which the processes keep their threads.
// Throws BenchError when a process or /proc cannot be read.
double processCpuSeconds(std::initializer_list<int> pids);

// Puts the calling thread under SCHED_FIFO at priority 1; threads and processes it creates from
// then on inherit that. Throws BenchError naming the reason when not permitted (root or
// CAP_SYS_NICE is needed).
void enterFifo();
// How many threads of processes `pids` do not run under SCHED_FIFO, and how many there are.
// Throws BenchError when /proc cannot be read.
std::pair<int, int> threadsOutsideFifo(std::initializer_list<int> pids);
// Restricts the calling thread (and the threads and processes it creates from then on) to `cpu`.
// Throws BenchError when the CPU does not exist or cannot be used.
void pinToCpu(int cpu);
// How many threads of process `pid` may run on a CPU other than `cpu`.
int threadsOffCpu(int pid, int cpu);

// Host facts for reports: nproc, CPU model, kernel, load average.
Json hostJson();
std::string cpuModel();

// Flags of the form "--name value" or "--name" (booleans). Unknown flags are usage errors.
class Flags {
 public:
  // `valued`: flags that take a value; `booleans`: flags that do not.
  Flags(int argc, char** argv, int first, const std::vector<std::string>& valued,
        const std::vector<std::string>& booleans);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& dflt) const;
  long integer(const std::string& name, long dflt, long lo, long hi) const;
  double number(const std::string& name, double dflt, double lo, double hi) const;

 private:
  std::map<std::string, std::string> values_;
};

// "64K", "64KiB", "1M", "16MiB", "1048576" -> bytes. Throws UsageError.
size_t parseSize(const std::string& text);
// A comma-separated list of sizes.
std::vector<size_t> parseSizes(const std::string& text);
// 65536 -> "64KiB", 1048576 -> "1MiB".
std::string sizeName(size_t bytes);

// Whether --strict is among argv[first..] (a missed target then exits 1).
inline bool strict(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    if (std::string(argv[i]) == "--strict") return true;
  }
  return false;
}

// "PASS" or "MISS".
inline const char* verdict(bool ok) { return ok ? "PASS" : "MISS"; }

}  // namespace mwb
