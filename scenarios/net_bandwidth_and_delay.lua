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
  -- 8 s: the cap is judged from when it was in force (the fault's acked_s), which beside busy
  -- CPUs came up to 2.3 s after it was sent (the kernel's tc call waits out an RCU grace period:
  -- docs/testing.md, Hunt 20).
  duration = "8s",
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
    -- w2's rate at the leader from 0.3 s after the cap was in force, against the second before it.
    check = function(run)
      local cap = run.faults[1]
      local from = (cap.acked_s >= 0 and cap.acked_s or cap.sent_s) + 0.3
      local s = run.series.w2.leader
      local before, after, nb, na = 0, 0, 0, 0
      for i, t in ipairs(s.t_s) do
        if t > 1 and t <= 3 then before, nb = before + s.bytes[i], nb + 1 end
        if t > from and t <= 8 then after, na = after + s.bytes[i], na + 1 end
      end
      if na < 5 then
        return false, string.format("the cap was in force only at %.2f s: too late to judge", from - 0.3)
      end
      local rb, ra = before / (nb * 0.1) / 1e6, after / (na * 0.1) / 1e6
      -- 50 Mbit/s is 6.25 MB/s; what was in flight at the cap still arrives at full speed
      return ra < rb / 4,
             string.format("w2 at the leader (capped at 6.25 MB/s): %.1f MB/s before, %.1f MB/s after the cap (in force at %.2f s)",
                           rb, ra, from - 0.3)
    end,
  },
}
