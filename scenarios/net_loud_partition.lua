-- A loud partition: every TCP packet between h2 and the other hosts is answered with a reset, so
-- a connection fails (ECONNRESET) as soon as anything is sent on it. The store pings each member
-- every heartbeat interval (timeout / 10 = 50 ms here), so w2 breaks within 100 ms; w1 does not.
local worlds, roles = star {
  workers = { "a", "b" },
  hosts = true,
  world = { heartbeat = "500ms" },
}
scenario {
  name = "a loud partition breaks its world at once",
  description = "iptables REJECT --reject-with tcp-reset between h2 and the others at 3 s.",
  -- The traffic is paced (200 operations/s): w1's verdict asks whether the survivor keeps serving
  -- its load, not how a saturated CPU is shared. Unpaced, beside two CPU hogs, w1's windows jumped
  -- between levels 3x apart after the fault as the scheduler placed the remaining threads anew
  -- (docs/testing.md, "Hunt 3"). The fault comes at 3 s, after 2 s of measured traffic.
  duration = "5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("3s", partition { a = { "h2" }, b = { "h0", "h1" }, mode = "loud" }) },
  expect = {
    broken = { "w2" },
    detected_within = "100ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
