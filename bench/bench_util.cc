#include "bench_util.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

namespace mwb {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  double idx = p * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(idx));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = idx - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

namespace {

// P(Binomial(n, 1/2) = i), in log space so that large n does not underflow.
double binomialPmfHalf(size_t n, size_t i) {
  const double x = static_cast<double>(n);
  return std::exp(std::lgamma(x + 1) - std::lgamma(static_cast<double>(i) + 1) -
                  std::lgamma(static_cast<double>(n - i) + 1) - x * std::log(2.0));
}

// Fills ci_lo/ci_hi/ci_level of `s` from the sorted sample `v`. Linear in n (the CDF is summed
// as the bound moves), so that samples of thousands stay instant.
void medianInterval(const std::vector<double>& v, Summary& s) {
  const size_t n = v.size();
  size_t k = 1;                        // 1-based order statistic of the lower bound
  double cdf = binomialPmfHalf(n, 0);  // P(X <= k - 1)
  double level = 1 - 2 * cdf;
  for (size_t c = 2; c <= (n + 1) / 2; ++c) {
    cdf += binomialPmfHalf(n, c - 1);
    double l = 1 - 2 * cdf;
    if (l < 0.95) break;
    k = c;
    level = l;
  }
  s.ci_lo = v[k - 1];
  s.ci_hi = v[n - k];
  s.ci_level = level;
}

}  // namespace

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.p10 = percentile(v, 0.10);
  s.median = percentile(v, 0.50);
  s.p90 = percentile(v, 0.90);
  s.p99 = percentile(v, 0.99);
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  medianInterval(v, s);
  return s;
}

Json::Json(const std::vector<double>& v) : kind_(Kind::kArray) {
  for (double d : v) items_.emplace_back(d);
}

Json Json::object() {
  Json j;
  j.kind_ = Kind::kObject;
  return j;
}

Json Json::array() {
  Json j;
  j.kind_ = Kind::kArray;
  return j;
}

Json& Json::set(const std::string& key, Json value) {
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) {
      items_[i] = std::move(value);
      return *this;
    }
  }
  keys_.push_back(key);
  items_.push_back(std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  items_.push_back(std::move(value));
  return *this;
}

namespace {

void quote(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

void Json::dumpTo(std::string& out, int indent) const {
  const std::string pad(static_cast<size_t>(indent + 2), ' ');
  switch (kind_) {
    case Kind::kNull:
      out += "null";
      return;
    case Kind::kBool:
      out += bool_ ? "true" : "false";
      return;
    case Kind::kNumber: {
      if (!std::isfinite(num_)) {
        out += "null";
        return;
      }
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", num_);
      out += buf;
      return;
    }
    case Kind::kString:
      quote(out, str_);
      return;
    case Kind::kArray: {
      // Arrays of numbers stay on one line: raw samples are long.
      bool flat = std::all_of(items_.begin(), items_.end(), [](const Json& j) {
        return j.kind_ != Kind::kObject && j.kind_ != Kind::kArray;
      });
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out += flat ? ", " : ",";
        if (!flat) out += "\n" + pad;
        items_[i].dumpTo(out, indent + 2);
      }
      if (!flat && !items_.empty()) out += "\n" + std::string(static_cast<size_t>(indent), ' ');
      out += ']';
      return;
    }
    case Kind::kObject: {
      out += '{';
      for (size_t i = 0; i < items_.size(); ++i) {
        out += i ? ",\n" : "\n";
        out += pad;
        quote(out, keys_[i]);
        out += ": ";
        items_[i].dumpTo(out, indent + 2);
      }
      if (!items_.empty()) out += "\n" + std::string(static_cast<size_t>(indent), ' ');
      out += '}';
      return;
    }
  }
}

std::string Json::dump() const {
  std::string out;
  dumpTo(out, 0);
  out += '\n';
  return out;
}

Json toJson(const Summary& s) {
  Json j = Json::object();
  j.set("n", s.n).set("min", s.min).set("p10", s.p10).set("median", s.median);
  j.set("p90", s.p90).set("p99", s.p99).set("max", s.max).set("mean", s.mean);
  j.set("median_ci_lo", s.ci_lo).set("median_ci_hi", s.ci_hi).set("median_ci_level", s.ci_level);
  return j;
}

Json sampleJson(const std::vector<double>& samples) {
  Json j = toJson(summarize(samples));
  j.set("samples", Json(samples));
  return j;
}

void writeJson(const std::string& path, const Json& doc) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << doc.dump();
  out.close();
  if (!out) throw BenchError("cannot write " + path);
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

namespace {

// Calls fn(tid, task_dir) for every thread of process `pid` (a thread may end before fn looks at
// it). Throws BenchError when the process's threads cannot be listed.
template <typename Fn>
void forEachThread(int pid, Fn fn) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(dir, ec)) {
    fn(std::atoi(task.path().filename().c_str()), task.path());
  }
  if (ec) throw BenchError("cannot list the threads of process " + std::to_string(pid));
}

}  // namespace

double processCpuSeconds(std::initializer_list<int> pids) {
  double total = 0;
  for (int pid : pids) {
    bool any = false;
    forEachThread(pid, [&](int, const std::filesystem::path& task) {
      std::ifstream in(task / "schedstat");
      unsigned long long ns = 0;
      if (in >> ns) {  // a thread that ended between the listing and the read counts as none
        total += static_cast<double>(ns) / 1e9;
        any = true;
      }
    });
    if (!any) {
      throw BenchError("cannot read the CPU time of process " + std::to_string(pid) +
                       " from /proc/" + std::to_string(pid) + "/task/*/schedstat");
    }
  }
  return total;
}

void enterFifo() {
  sched_param sp{};
  sp.sched_priority = 1;
  if (::sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
    throw BenchError(std::string("--fifo: cannot enter SCHED_FIFO (needs root or CAP_SYS_NICE): ") +
                     std::strerror(errno));
  }
}

std::pair<int, int> threadsOutsideFifo(std::initializer_list<int> pids) {
  int outside = 0, all = 0;
  for (int pid : pids) {
    forEachThread(pid, [&](int tid, const std::filesystem::path&) {
      const int policy = ::sched_getscheduler(tid);
      if (policy < 0) return;  // ended since the listing
      ++all;
      if (policy != SCHED_FIFO) ++outside;
    });
  }
  return {outside, all};
}

void pinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0) {
    throw BenchError("--pin: cannot run on CPU " + std::to_string(cpu) + ": " +
                     std::strerror(errno));
  }
}

int threadsOffCpu(int pid, int cpu) {
  int off = 0;
  forEachThread(pid, [&](int tid, const std::filesystem::path&) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(tid, sizeof set, &set) != 0) return;  // ended since the listing
    if (CPU_COUNT(&set) != 1 || !CPU_ISSET(cpu, &set)) ++off;
  });
  return off;
}

Json hostJson() {
  Json j = Json::object();
  j.set("nproc", static_cast<long>(sysconf(_SC_NPROCESSORS_ONLN)));
  j.set("cpu_model", cpuModel());
  utsname u{};
  if (uname(&u) == 0) j.set("kernel", std::string(u.sysname) + " " + u.release);
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) j.set("loadavg_1m_at_start", load[0]);
  return j;
}

Flags::Flags(int argc, char** argv, int first, const std::vector<std::string>& valued,
             const std::vector<std::string>& booleans) {
  auto known = [](const std::vector<std::string>& v, const std::string& f) {
    return std::find(v.begin(), v.end(), f) != v.end();
  };
  for (int i = first; i < argc; ++i) {
    std::string f = argv[i];
    if (known(booleans, f)) {
      values_[f] = "1";
    } else if (known(valued, f)) {
      if (i + 1 >= argc) throw UsageError("missing value for " + f);
      values_[f] = argv[++i];
    } else {
      throw UsageError("unknown flag " + f);
    }
  }
}

std::string Flags::str(const std::string& name, const std::string& dflt) const {
  auto it = values_.find(name);
  return it == values_.end() ? dflt : it->second;
}

long Flags::integer(const std::string& name, long dflt, long lo, long hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return dflt;
  char* end = nullptr;
  long v = std::strtol(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0' || v < lo || v > hi) {
    throw UsageError(name + " wants an integer in " + std::to_string(lo) + ".." +
                     std::to_string(hi) + ", not '" + it->second + "'");
  }
  return v;
}

double Flags::number(const std::string& name, double dflt, double lo, double hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return dflt;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || !(v >= lo && v <= hi)) {
    std::ostringstream s;
    s << name << " wants a number in " << lo << ".." << hi << ", not '" << it->second << "'";
    throw UsageError(s.str());
  }
  return v;
}

size_t parseSize(const std::string& text) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  std::string unit = end ? end : "";
  unsigned long long mul = 0;
  if (unit.empty() || unit == "B")
    mul = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k")
    mul = 1ull << 10;
  else if (unit == "M" || unit == "MiB")
    mul = 1ull << 20;
  else if (unit == "G" || unit == "GiB")
    mul = 1ull << 30;
  if (end == text.c_str() || mul == 0 || v == 0) throw UsageError("bad size '" + text + "'");
  return static_cast<size_t>(v * mul);
}

std::vector<size_t> parseSizes(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) out.push_back(parseSize(part));
  }
  if (out.empty()) throw UsageError("empty size list '" + text + "'");
  return out;
}

std::string sizeName(size_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

}  // namespace mwb
