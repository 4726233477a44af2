-- 20% packet loss on host h2 (worker b, world w2) from 3 s. The other world keeps at least 97% of
-- its throughput; the lossy world's drop is reported by the check hook.
local worlds, roles = star {
  workers = { "a", "b" },
  hosts = true,
  world = { heartbeat = "1s" },
  each = { w2 = { heartbeat = "3s", op_timeout = "20s" } },
}
scenario {
  name = "20% loss on one world's link",
  description = "iptables statistic drops 20% of h2's packets both ways from 3 s.",
  -- The traffic is paced (200 operations/s): w1's verdict asks whether the survivor keeps serving
  -- its load, not how a saturated CPU is shared. Unpaced, beside two CPU hogs, w1's windows jumped
  -- between levels 3x apart after the fault as the scheduler placed the remaining threads anew
  -- (docs/testing.md, "Hunt 3"). The fault comes at 3 s, after 2 s of measured traffic.
  duration = "6s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("3s", loss("h2", 0.2)) },
  expect = {
    healthy = { "w1" },
    throughput = { throughput_kept { world = "w1", ratio = 0.97 } },
    check = function(run)
      local w = run.worlds.w2
      local before, after = w.bytes_per_s_before / 1e6, w.bytes_per_s_after / 1e6
      return before > 0, string.format("w2 (lossy): %.1f MB/s before, %.1f MB/s after (%.0f%%)",
                                       before, after, before > 0 and after / before * 100 or 0)
    end,
  },
}
