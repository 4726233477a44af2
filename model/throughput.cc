#include "model/throughput.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace mw::harness {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kBlock = 5;  // windows per bootstrap block (500 ms: noise comes in bursts)
constexpr int kResamples = 2000;
constexpr double kTail = 0.05;  // each side of the 90% interval

// The rank-0 role's windows of `world` (bytes per second) whose end lies in (from, to]; `role`'s
// when given.
std::vector<double> rates(const Scenario& s, const RunRecord& r, const std::string& world,
                          double from, double to, const std::string& role = "") {
  std::vector<double> out;
  auto members = role.empty() ? s.membersOf(world) : std::vector<std::string>{role};
  if (members.empty()) return out;
  auto wit = r.windows.find(world);
  if (wit == r.windows.end()) return out;
  auto rit = wit->second.find(members[0]);
  if (rit == wit->second.end()) return out;
  for (const auto& w : rit->second) {
    if (w.t > from && w.t <= to) out.push_back(w.bytes / 0.1);
  }
  return out;
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// The mean of a circular block resample of `v`.
double resampledMean(const std::vector<double>& v, std::mt19937_64& rng) {
  const size_t n = v.size();
  const size_t block = std::min<size_t>(kBlock, std::max<size_t>(1, n / 2));
  std::uniform_int_distribution<size_t> start(0, n - 1);
  double sum = 0;
  size_t taken = 0;
  while (taken < n) {
    size_t i = start(rng);
    for (size_t k = 0; k < block && taken < n; ++k, ++taken) sum += v[(i + k) % n];
  }
  return sum / static_cast<double>(n);
}

// The 90% interval of mean(after) / mean(before).
std::pair<double, double> ratioInterval(const std::vector<double>& before,
                                        const std::vector<double>& after, uint64_t seed) {
  if (before.empty() || after.empty()) return {kNaN, kNaN};
  std::mt19937_64 rng(seed);
  std::vector<double> ratios;
  ratios.reserve(kResamples);
  for (int i = 0; i < kResamples; ++i) {
    const double b = resampledMean(before, rng);
    const double a = resampledMean(after, rng);
    ratios.push_back(b > 0 ? a / b : 0);
  }
  std::sort(ratios.begin(), ratios.end());
  auto at = [&](double q) {
    return ratios[std::min(ratios.size() - 1, static_cast<size_t>(q * ratios.size()))];
  };
  return {at(kTail), at(1 - kTail)};
}

uint64_t mix(uint64_t seed, const std::string& world) {
  uint64_t h = 1469598103934665603ULL ^ seed;  // FNV-1a over the world's name
  for (unsigned char c : world) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// The machine's busy CPU-seconds between the samples nearest to `from` and `to`, or NaN.
double machineBusy(const RunRecord& r, double from, double to, double* span) {
  const MachineRec* a = nullptr;
  const MachineRec* b = nullptr;
  for (const auto& m : r.machine) {
    if (m.t <= from || a == nullptr) a = &m;
    if (m.t <= to) b = &m;
  }
  if (a == nullptr || b == nullptr || b->t - a->t < 0.2) return kNaN;
  *span = b->t - a->t;
  return b->busy - a->busy;
}

CpuStretch cpuIn(const RunRecord& r, const std::vector<std::string>& survivors, double from,
                 double to) {
  CpuStretch out{kNaN, kNaN};
  double got = 0, waited = 0, scenario = 0;
  bool any = false;
  for (const auto& [role, ws] : r.cpu) {
    const bool survivor = std::find(survivors.begin(), survivors.end(), role) != survivors.end();
    for (const auto& w : ws) {
      if (w.t <= from || w.t > to) continue;
      scenario += w.cpu;
      if (!survivor) continue;
      got += w.cpu, waited += w.wait, any = true;
    }
  }
  if (any && got + waited > 0) out.share = got / (got + waited);
  double span = 0;
  const double busy = machineBusy(r, from, to, &span);
  // The scenario's CPU over (from, to] against the machine's over the nearest samples: scaled to
  // the machine's span so that the two cover the same time.
  if (!std::isnan(busy) && span > 0) {
    out.outside = std::max(0.0, busy - scenario * span / std::max(to - from, 1e-9)) / span;
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

}  // namespace

Rate throughputBetween(const Scenario& s, const RunRecord& r, const std::string& world, double from,
                       double to, const std::string& role) {
  Rate out;
  std::vector<double> v = rates(s, r, world, from, to, role);
  if (v.empty()) return out;
  out.windows = static_cast<int>(v.size());
  out.mean = mean(v);
  std::sort(v.begin(), v.end());
  out.median = v[v.size() / 2];
  out.min = v.front();
  out.max = v.back();
  return out;
}

ThroughputEvidence measureThroughput(const Scenario& s, const RunRecord& r,
                                     const std::string& world, double b0, double b1, double a0,
                                     double a1, const std::string& role) {
  ThroughputEvidence e;
  e.before = throughputBetween(s, r, world, b0, b1, role);
  e.after = throughputBetween(s, r, world, a0, a1, role);
  e.ratio = e.before.mean > 0 ? e.after.mean / e.before.mean : 0;
  const uint64_t seed = mix(s.seed, world);
  std::tie(e.lo, e.hi) =
      ratioInterval(rates(s, r, world, b0, b1, role), rates(s, r, world, a0, a1, role), seed);
  // The control: the later half of the fault-free stretch against its earlier half.
  const double mid = (b0 + b1) / 2;
  auto first = rates(s, r, world, b0, mid, role), second = rates(s, r, world, mid, b1, role);
  e.control = e.control_lo = e.control_hi = kNaN;
  if (first.size() >= 3 && second.size() >= 3 && mean(first) > 0) {
    e.control = mean(second) / mean(first);
    std::tie(e.control_lo, e.control_hi) = ratioInterval(first, second, seed + 1);
  }
  std::vector<std::string> survivors;
  for (const auto& member : role.empty() ? s.membersOf(world) : std::vector<std::string>{role}) {
    auto it = r.cpu.find(member);
    if (it == r.cpu.end()) continue;
    if (std::any_of(it->second.begin(), it->second.end(),
                    [&](const CpuRec& c) { return c.t > a0; })) {
      survivors.push_back(member);
    }
  }
  e.cpu_before = cpuIn(r, survivors, b0, b1);
  e.cpu_after = cpuIn(r, survivors, a0, a1);
  return e;
}

ThroughputJudgement judgeThroughput(const ThroughputEvidence& e, double bar) {
  if (std::isnan(e.lo) || std::isnan(e.hi)) {
    return {VerdictStatus::kInconclusive, "too few windows to measure the ratio"};
  }
  if (e.lo >= bar) return {VerdictStatus::kPass, ""};
  if (e.hi >= bar) {
    return {VerdictStatus::kInconclusive,
            "the ratio's 90% interval [" + fmt("%.2f", e.lo) + ", " + fmt("%.2f", e.hi) +
                "] holds the bar " + fmt("%.2f", bar) + ": the windows vary too much to tell"};
  }
  if (std::isnan(e.control)) {
    return {VerdictStatus::kInconclusive,
            "too few windows before the fault for a control (3 in each half are needed)"};
  }
  if (e.control < bar) {
    return {VerdictStatus::kInconclusive,
            "without any fault this run's throughput moved as much: the control " +
                fmt("%.2f", e.control) + " is below the bar " + fmt("%.2f", bar)};
  }
  // A control that rose by as much is the same evidence: the fault-free stretch moved past the
  // bar's margin on its own, and an inflated "before" makes any "after" look like a drop (seen
  // beside two CPU hogs: controls of 1.17 and 1.18 under bars of 0.97 and 0.90).
  if (bar > 0 && e.control > 1 / bar) {
    return {VerdictStatus::kInconclusive,
            "without any fault this run's throughput moved as much: the control " +
                fmt("%.2f", e.control) + " rose past " + fmt("%.2f", 1 / bar) +
                " (the bar's margin, upwards)"};
  }
  const CpuStretch &b = e.cpu_before, &a = e.cpu_after;
  if (!std::isnan(b.share) && !std::isnan(a.share) && !std::isnan(b.outside) &&
      !std::isnan(a.outside) && a.share < b.share - kShareDrop &&
      a.outside > b.outside + kOutsideRise) {
    return {VerdictStatus::kInconclusive,
            "the machine took the CPU: the survivors got " + fmt("%.0f%%", a.share * 100) +
                " of the CPU they wanted after the fault, " + fmt("%.0f%%", b.share * 100) +
                " before, while load from outside the scenario rose from " +
                fmt("%.2f", b.outside) + " to " + fmt("%.2f", a.outside) + " CPUs"};
  }
  return {VerdictStatus::kFail, ""};
}

}  // namespace mw::harness
