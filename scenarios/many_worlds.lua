-- One leader process in 32 worlds, one worker process per world: 33 processes on however many
-- cores there are. Worker 7 is killed: world w7 breaks, the other 31 do not. The scenario is
-- built with a Lua loop, as scenarios may be.
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
  description = "Leader in w1..w32, worker i in wi; 16 KiB tensors at 50 per second each; worker7 is killed at 3 s.",
  duration = "5s",
  warmup = "1.5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = names, bytes = "16KiB", rate = 50 } },
  timeline = { at("3s", kill("worker7")) },
  expect = {
    broken = { "w7" },
    detected_within = "200ms",
    throughput = {
      throughput_kept { world = "w1", ratio = 0.9 },
      throughput_kept { world = "w32", ratio = 0.9 },
    },
  },
}
