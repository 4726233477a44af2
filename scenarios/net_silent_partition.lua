-- Three simulated hosts. At 3 s host h2 (worker b) is cut off silently: its packets are dropped
-- both ways, nothing is closed. w2 must break at the leader within its heartbeat timeout + 250 ms;
-- w1 (leader and a, on h0 and h1) is not touched.
local worlds, roles = star {
  workers = { "a", "b" },
  hosts = true,
  world = { heartbeat = "500ms" },
}
scenario {
  name = "a silent partition isolates one worker",
  description = "iptables DROP between h2 and the other hosts at 3 s; w2 heartbeat 500 ms.",
  -- The traffic is paced (200 operations/s): w1's verdict asks whether the survivor keeps serving
  -- its load, not how a saturated CPU is shared. Unpaced, beside two CPU hogs, w1's windows jumped
  -- between levels 3x apart after the fault as the scheduler placed the remaining threads anew
  -- (docs/testing.md, "Hunt 3"). The fault comes at 3 s, after 2 s of measured traffic.
  duration = "5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("3s", partition { a = { "h2" }, b = { "h0", "h1" } }) },
  expect = {
    broken = { "w2" },
    detected_within = "750ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
