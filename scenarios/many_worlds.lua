-- One leader process in 32 worlds, one worker process per world: 33 processes on however many
-- cores there are. Worker 7 is killed: world w7 breaks, the other 31 do not. The scenario is
-- built with a Lua loop, as scenarios may be.
--
-- Sized for a 2-core machine: 33 processes and about 200 threads keep the run queue 15 to 30 deep
-- there even at 20 operations/s per world (the survivors get a few percent of the CPU time they
-- are runnable for), and a share of the cores may be taken by the host (steal time). At 50/s the
-- survivors' throughput before and after the fault varied so much that 4 runs in 6 could not tell
-- 0.9 from 1.0 (inconclusive), and CI saw three such runs in a row. At 20/s, with 3 s of traffic
-- before the fault and 3.5 s after it, the ratio's 90% interval reached below 0.9 in 4 runs of 14
-- and below 0.85 in none of them: the bar is 0.85, which a fault that takes a sixth of the
-- survivors' throughput still fails (docs/testing.md, "Hunt 10").
local worlds, roles, names = {}, { leader = { worlds = {} } }, {}
for i = 1, 32 do
  local w = "w" .. i
  worlds[w] = { heartbeat = "1s" }
  roles.leader.worlds[w] = 0
  roles["worker" .. i] = { worlds = { [w] = 1 } }
  names[#names + 1] = w
end

scenario {
  name = "32 worlds in one process: one breaks, 31 keep going",
  description = "Leader in w1..w32, worker i in wi; 16 KiB tensors at 20 per second each; worker7 is killed at 4.5 s.",
  duration = "8s",
  warmup = "1.5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = names, bytes = "16KiB", rate = 20 } },
  timeline = { at("4.5s", kill("worker7")) },
  expect = {
    broken = { "w7" },
    detected_within = "200ms",
    throughput = {
      throughput_kept { world = "w1", ratio = 0.85 },
      throughput_kept { world = "w32", ratio = 0.85 },
    },
  },
}
