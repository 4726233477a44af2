-- connect(2) failing: worker b leaves world w2 at 2.2 s and is told to join it again at 2.5 s,
-- while every connect of its process fails with ECONNREFUSED (libfiu's preload library, from
-- 2 s to 5 s). Each try fails with an error that says so (a join_failed event in the report) and
-- nothing hangs; once the fault is cleared, b joins w2's next generation and data moves again.
-- The leader re-creates w2 for it (rejoin = true), and that generation must stay up although its
-- rendezvous waited seconds for b. w1 is never touched.
local worlds, roles = star {
  workers = { "a", "b" },
  world = { heartbeat = "500ms" },
  each = { w2 = { heartbeat = "500ms", rejoin = true } },
}
scenario {
  name = "connect failing keeps a member out of its world until it clears, with a clear error",
  description = "posix/io/net/connect fails with ECONNREFUSED in b from 2 s to 5 s; b leaves w2 at 2.2 s and rejoins from 2.5 s.",
  duration = "7s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = {
    at("2s", failpoint("b", "posix/io/net/connect", { errno = "ECONNREFUSED" })),
    at("2.2s", remove_world("b", "w2")),
    at("2.5s", add_world("b", "w2")),
    at("5s", clear_failpoint("b", "posix/io/net/connect")),
  },
  expect = {
    broken = { "w2" },
    detected_within = "100ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
    check = function(run)
      local refused, rejoined, later_breaks = 0, false, 0
      for _, e in ipairs(run.events) do
        if e.role == "b" and e.world == "w2" and e.kind == "join_failed" and e.t_s > 2.5 and
           e.t_s < 5.2 and e.detail:find("refused") then
          refused = refused + 1
        end
        if e.world == "w2" and e.kind == "broken" and e.generation >= 2 and e.t_s < 6.9 then
          later_breaks = later_breaks + 1  -- the new generation must stay up (until the stop at 7 s)
        end
        if e.role == "b" and e.world == "w2" and e.kind == "created" and e.generation >= 2 and
           e.t_s > 5 then
          rejoined = true
        end
      end
      local moved = 0
      local s = run.series.w2 and run.series.w2.leader
      for i, t in ipairs(s and s.t_s or {}) do
        if t > 5.5 then moved = moved + s.bytes[i] end
      end
      local ok = refused > 0 and rejoined and later_breaks == 0 and moved > 0
      return ok, string.format("b's joins refused: %d; b in w2's next generation after 5 s: %s; " ..
                               "breaks of a later generation: %d; %.1f MB in w2 after 5.5 s",
                               refused, tostring(rejoined), later_breaks, moved / 1e6)
    end,
  },
}
