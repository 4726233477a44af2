-- Host h2's outgoing traffic is capped at 50 Mbit/s (tc tbf) at 3 s, then delayed by 20 ms at 4 s
-- (tc netem, or the runtime's delay failpoint where the kernel has no netem). Neither breaks a
-- world; w1 keeps its throughput, and the hook reports what the cap did to w2.
local worlds, roles = star {
  workers = { "a", "b" },
  hosts = true,
  world = { heartbeat = "1s" },
  each = { w2 = { heartbeat = "2s", op_timeout = "20s" } },
}
scenario {
  name = "a bandwidth cap and a delay on one host",
  description = "tbf 50mbit on h2 at 3 s; netem delay 20 ms on h2 at 4 s.",
  -- The traffic is paced (200 operations/s): w1's verdict asks whether the survivor keeps serving
  -- its load, not how a saturated CPU is shared. Unpaced, beside two CPU hogs, w1's windows jumped
  -- between levels 3x apart after the fault as the scheduler placed the remaining threads anew
  -- (docs/testing.md, "Hunt 3"). The fault comes at 3 s, after 2 s of measured traffic.
  duration = "6s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = {
    at("3s", bandwidth("h2", "50mbit")),
    at("4s", delay("h2", "20ms")),
  },
  expect = {
    broken = {},
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
    check = function(run)
      local w = run.worlds.w2
      local before, after = w.bytes_per_s_before / 1e6, w.bytes_per_s_after / 1e6
      -- 50 Mbit/s is 6.25 MB/s; what was in flight at the cap still arrives at full speed
      return after < before / 4,
             string.format("w2 (capped at 6.25 MB/s): %.1f MB/s before, %.1f MB/s after", before, after)
    end,
  },
}
