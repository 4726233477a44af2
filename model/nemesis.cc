#include "model/nemesis.h"

namespace mw::harness {

std::vector<ActionSpec> drawNemesis(const NemesisSpec& n, uint64_t seed,
                                    const std::vector<std::string>& all_hosts,
                                    const std::string& where, size_t max_faults) {
  // splitmix64: the same sequence for the same seed on every machine and library.
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 0x6E656D65ULL;
  auto next = [&state]() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  auto pick = [&](size_t count) { return static_cast<size_t>(next() % count); };
  auto unit = [&]() { return static_cast<double>(next() >> 11) / 9007199254740992.0; };
  std::vector<ActionSpec> out;
  long long t = n.start.count();
  int k = 0;
  for (size_t drawn = 0; drawn < max_faults; ++drawn) {
    t += static_cast<long long>(static_cast<double>(n.gap.count()) * (0.5 + unit()));
    if (t + n.hold.count() > n.stop.count()) break;
    ActionSpec on, off;
    on.at = Ms(t);
    off.at = Ms(t + n.hold.count());
    on.where = off.where = where + " (nemesis #" + std::to_string(++k) + ")";
    const std::string kind = n.faults[pick(n.faults.size())];
    if (kind == "partition" || kind == "loss") {
      std::string host = n.hosts[pick(n.hosts.size())];
      off.fault = Heal{};
      if (kind == "partition") {
        Partition p;
        p.a = {host};
        for (const auto& h : all_hosts) {
          if (h != host) p.b.push_back(h);
        }
        on.fault = std::move(p);
      } else {
        on.fault = Loss{host, n.loss};
      }
    } else {
      std::string role = n.roles[pick(n.roles.size())];
      if (kind == "pause") {
        on.fault = Pause{role};
        off.fault = Resume{role};
      } else {
        on.fault = Kill{role};
        off.fault = Restart{role};
      }
    }
    out.push_back(on);
    out.push_back(off);
    t += n.hold.count();
  }
  return out;
}

}  // namespace mw::harness
