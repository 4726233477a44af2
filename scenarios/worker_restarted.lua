-- Worker b is killed, then started again: it joins a fresh generation of w2 (the leader leaves the
-- broken w2 and re-creates it under the same name), which is healthy again within 3 s; w1 never
-- notices.
local worlds, roles = star {
  workers = { "a", "b" },
  world = { heartbeat = "500ms" },
  each = { w2 = { heartbeat = "500ms", rejoin = true } },
}
scenario {
  name = "a restarted worker rejoins a fresh world",
  description = "b is SIGKILLed at 1.5 s and restarted at 2.5 s; w2 re-forms with rejoin = true.",
  duration = "5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = {
    at("1.5s", kill("b")),
    at("2.5s", restart("b")),
  },
  expect = {
    broken = { "w2" },
    detected_within = "100ms",
    replacement_within = "3s",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
    -- a hook for what a table cannot say: w2 carried traffic again after the restart
    check = function(run)
      local s = run.series.w2 and run.series.w2.leader
      if not s then return false, "no metrics for w2 at the leader" end
      local after = 0
      for i, t in ipairs(s.t_s) do
        if t > 3.5 and s.generation[i] >= 2 then after = after + s.bytes[i] end
      end
      return after > 0, string.format("%.1f MB moved in w2's new generation after 3.5 s", after / 1e6)
    end,
  },
}
