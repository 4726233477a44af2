// mw_bench creation: how long a world takes to come up on loopback, and to go away.
//
// This process is rank 0 (it hosts the store on a port it picks); persistent agents are the other
// members. A creation is timed from the initWorldAsync call at rank 0 to the completion of its
// join Work (every member joined, world healthy). The other members are told the port as soon as
// rank 0 knows it and join at once. Series, interleaved rep by rep:
//   2 members, fresh name     a name this process has never used
//   2 members, reused name    the same name again after removeWorld (generation + 1)
//   4 members, fresh / reused (informational)
#include <cstdio>
#include <sstream>
#include <thread>

#include "agent.h"
#include "bench_util.h"
#include "subcommands.h"

namespace mwb {

const char* const kCreationHelp =
    "mw_bench creation [--reps N] [--heartbeat-ms MS] [--gap-ms MS] [--no-four] [--json PATH]\n"
    "                  [--strict]\n"
    "\n"
    "Time from initWorld at rank 0 (this process, hosting the world's store on a free port) to\n"
    "the world being healthy there, with the other members (persistent agent processes) joining\n"
    "as soon as the port is known. Interleaved per rep: 2 members with a fresh name, 2 members\n"
    "re-creating a name after removeWorld, 2 members whose world broke (the agent left) before\n"
    "removeWorld, and the same with 4 members (3 agents; info only).\n"
    "Also reported: the first creation of the process (cold), each agent's own initWorld time,\n"
    "and removeWorld at rank 0. Targets: 2-member creation p90 and max <= 50 ms; removeWorld of\n"
    "a 2-member world, healthy or broken, median < 2 ms.\n"
    "\n"
    "  --reps N           reps per series (default 20)\n"
    "  --heartbeat-ms MS  heartbeat timeout of the worlds (default 1000)\n"
    "  --gap-ms MS        pause between creations (default 50)\n"
    "  --no-four          skip the 4-member series\n"
    "  --json PATH        write raw samples, medians and spreads\n"
    "  --strict           exit 1 when the target is missed\n";

namespace {

struct Series {
  std::string key;
  int members = 2;
  bool reuse = false;
  bool broken = false;  // the other members leave first: removeWorld of a broken world
  std::vector<double> create_ms, agent_join_ms, remove_ms;
  std::vector<double> all_ms;  // until every member's initWorld returned
};

struct Env {
  mw::WorldManager manager;
  std::vector<std::unique_ptr<Agent>> agents;
  std::chrono::milliseconds hb{1000};
  std::chrono::milliseconds gap{50};
};

// Creates `name` with `members` members, then removes it; appends the timings to `s` if given.
void createOnce(Env& e, const std::string& name, int members, Series* s) {
  const auto t0 = Clock::now();
  Hosted h = hostWorld(e.manager, name, members, e.hb);
  for (int r = 1; r < members; ++r) {
    e.agents[static_cast<size_t>(r - 1)]->post(joinCommand(name, r, members, h.port, e.hb));
  }
  expectOk(h.join.wait(mw::deadlineIn(std::chrono::seconds(20))), "creating " + name);
  const auto healthy0 = Clock::now();
  const double create = millis(healthy0 - t0);
  double slowest_agent = 0;
  auto everywhere = healthy0;  // the last member to return from initWorld, on the shared clock
  for (int r = 1; r < members; ++r) {
    std::istringstream ans(e.agents[static_cast<size_t>(r - 1)]->reply());  // "ok MS NS"
    std::string ok;
    double ms = 0;
    long long ns = 0;
    ans >> ok >> ms >> ns;
    slowest_agent = std::max(slowest_agent, ms);
    everywhere = std::max(everywhere, Clock::time_point(std::chrono::nanoseconds(ns)));
  }
  std::this_thread::sleep_for(e.gap);
  const bool broken = s != nullptr && s->broken;
  if (broken) {
    // The others leave: rank 0 learns it (kPeerLeft) and the world breaks there.
    for (int r = 1; r < members; ++r) e.agents[static_cast<size_t>(r - 1)]->call("leave " + name);
    const auto until = Clock::now() + std::chrono::seconds(10);
    auto state = [&] {
      for (const auto& w : e.manager.worlds())
        if (w.name == name) return w.state;
      return mw::WorldState::kRemoved;
    };
    while (state() != mw::WorldState::kBroken) {
      if (Clock::now() > until) throw BenchError(name + " did not break after its peers left");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  const auto t1 = Clock::now();
  expectOk(e.manager.removeWorld(name), "removing " + name);
  const double remove = millis(Clock::now() - t1);
  if (!broken) {
    for (int r = 1; r < members; ++r) e.agents[static_cast<size_t>(r - 1)]->call("leave " + name);
  }
  std::this_thread::sleep_for(e.gap);
  if (s) {
    s->create_ms.push_back(create);
    s->agent_join_ms.push_back(slowest_agent);
    s->all_ms.push_back(millis(everywhere - t0));
    s->remove_ms.push_back(remove);
  }
}

Series series(std::string key, int members, bool reuse) {
  Series s;
  s.key = std::move(key);
  s.members = members;
  s.reuse = reuse;
  return s;
}

std::string worldName(const Series& s, int rep) {
  return s.reuse ? "again" + std::to_string(s.members)
                 : "fresh" + std::to_string(s.members) + "-" + std::to_string(rep);
}

void printSeries(const Series& s) {
  Summary c = summarize(s.create_ms), a = summarize(s.all_ms), r = summarize(s.remove_ms);
  std::printf("  %-24s %3zu  %7.2f %7.2f %7.2f %7.2f   %7.2f %7.2f   %7.2f\n", s.key.c_str(), c.n,
              c.min, c.median, c.p90, c.max, a.median, a.max, r.median);
}

}  // namespace

int runCreation(int argc, char** argv, int first) {
  Flags f(argc, argv, first, {"--reps", "--heartbeat-ms", "--gap-ms", "--json"},
          {"--no-four", "--strict"});
  const int reps = static_cast<int>(f.integer("--reps", 20, 1, 100000));
  const bool four = !f.has("--no-four");
  Env e;
  e.hb = std::chrono::milliseconds(f.integer("--heartbeat-ms", 1000, 50, 3600000));
  e.gap = std::chrono::milliseconds(f.integer("--gap-ms", 50, 0, 60000));
  const auto start = Clock::now();
  for (int i = 0; i < (four ? 3 : 1); ++i) {
    e.agents.push_back(Agent::spawn("agent " + std::to_string(i + 1)));
  }

  Series cold = series("2 members, cold (first)", 2, false);
  createOnce(e, "cold2", 2, &cold);  // the first world of this process
  std::vector<Series> all = {series("2 members, fresh name", 2, false),
                             series("2 members, reused name", 2, true),
                             series("2 members, broken", 2, false)};
  all.back().broken = true;
  if (four) {
    all.push_back(series("4 members, fresh name", 4, false));
    all.push_back(series("4 members, reused name", 4, true));
  }
  for (const auto& s : all) {
    if (s.reuse) createOnce(e, worldName(s, 0), s.members, nullptr);  // so later ones re-create
  }
  for (int rep = 0; rep < reps; ++rep) {
    for (auto& s : all) createOnce(e, worldName(s, rep), s.members, &s);
  }

  bool ok = true;
  bool remove_ok = true;
  for (const auto& s : all) {
    if (s.members != 2) continue;
    Summary c = summarize(s.create_ms);
    ok &= c.p90 <= 50.0 && c.max <= 50.0;
    remove_ok &= summarize(s.remove_ms).median < 2.0;
  }
  std::printf("\nworld creation on loopback (ms; initWorld at rank 0 -> healthy), %d reps\n", reps);
  std::printf("  %-24s %3s  %7s %7s %7s %7s   %-15s   %s\n", "series", "n", "min", "median", "p90",
              "max", "all-members med/max", "removeWorld@0 med");
  printSeries(cold);
  for (const auto& s : all) printSeries(s);
  std::printf("target: 2-member creation p90 and max <= 50 ms:");
  for (const auto& s : all) {
    if (s.members != 2) continue;
    Summary c = summarize(s.create_ms);
    std::printf(" %s p90 %.2f max %.2f %s;", s.key.c_str() + 11, c.p90, c.max,
                verdict(c.p90 <= 50.0 && c.max <= 50.0));
  }
  std::printf(" (4 members: information only)\n");
  std::printf(
      "target: removeWorld at rank 0 of a 2-member world, healthy or broken, median < 2 ms:");
  for (const auto& s : all) {
    if (s.members == 2) std::printf(" %s %.2f;", s.key.c_str() + 11, summarize(s.remove_ms).median);
  }
  std::printf(" %s\n", verdict(remove_ok));

  Json doc = Json::object();
  doc.set("benchmark", "creation").set("host", hostJson());
  Json cfg = Json::object();
  cfg.set("reps", reps).set("heartbeat_timeout_ms", static_cast<long>(e.hb.count()));
  cfg.set("gap_ms", static_cast<long>(e.gap.count()));
  doc.set("config", cfg);
  Json js = Json::array();
  all.insert(all.begin(), cold);
  for (const auto& s : all) {
    Json j = Json::object();
    j.set("series", s.key).set("members", s.members).set("reused_name", s.reuse);
    j.set("broken_before_removal", s.broken);
    j.set("create_ms", sampleJson(s.create_ms));
    j.set("healthy_everywhere_ms", sampleJson(s.all_ms));
    j.set("slowest_agent_initworld_ms", sampleJson(s.agent_join_ms));
    j.set("remove_ms_rank0", sampleJson(s.remove_ms));
    js.push(j);
  }
  doc.set("series", js);
  doc.set("target_2_members_p90_and_max_le_50ms_pass", ok);
  doc.set("target_remove_median_lt_2ms_pass", remove_ok);
  ok = ok && remove_ok;
  doc.set("wall_seconds", seconds(Clock::now() - start));
  writeJson(f.str("--json", ""), doc);
  return !ok && f.has("--strict") ? 1 : 0;
}

}  // namespace mwb
