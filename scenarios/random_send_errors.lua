-- Every send of worker a in w1 fails with probability 0.1 from 2 s on (libfiu's random points,
-- seeded per process from the scenario seed). w1 breaks; w2 never does.
local worlds, roles = star { workers = { "a", "b" }, world = { heartbeat = "500ms" } }
scenario {
  name = "sends failing with probability 0.1 break their world only",
  description = "ECONNRESET with probability 0.1 on a's sends in w1 from 2 s.",
  duration = "4s",
  seed = 11,
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "64KiB", rate = 200 } },
  timeline = {
    at("2s", failpoint("a", "mw/{backend}/send/w1", { errno = "ECONNRESET", probability = 0.1 })),
  },
  expect = {
    broken = { "w1" },
    detected_within = "1s",
    throughput = { throughput_kept { world = "w2", ratio = 0.9 } },
  },
}
