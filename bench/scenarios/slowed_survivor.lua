-- The negative control of the throughput verdict (bench/throughput_verdicts.sh): at 2.5 s worker c
-- is killed (w2 breaks) and, at the same instant, every operation of worker a in w1 is delayed by
-- 40 ms through the runtime's delay failpoint. w1 does not break, but its rate falls from 60
-- operations a second to about 20: a survivor really slowed to a third. Its throughput verdict
-- must fail, on an idle machine and beside CPU hogs alike.
local worlds, roles = star { workers = { "a", "c" }, world = { heartbeat = "1s" } }
scenario {
  name = "a survivor slowed to a third fails its throughput verdict",
  duration = "5s",
  warmup = "1s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "64KiB", rate = 60 } },
  timeline = {
    at("2.5s", kill("c")),
    at("2.5s", failpoint("a", "mw/gloo/delay/w1", { failnum = 40 })),
  },
  expect = {
    broken = { "w2" },
    throughput = { throughput_kept { world = "w1", ratio = 0.8 } },
  },
}
