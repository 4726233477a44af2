-- The leader hosts the store of both worlds and is a member of both: killing it must break every
-- world, at every surviving worker, within 100 ms.
local worlds, roles = star { workers = { "a", "b" }, world = { heartbeat = "500ms" } }
scenario {
  name = "the leader is killed: every world breaks",
  description = "Leader in w1 and w2 (rank 0, store host of both) is SIGKILLed at 2 s.",
  duration = "4s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB" } },
  timeline = { at("2s", kill("leader")) },
  expect = {
    broken = { "w1", "w2" },
    detected_within = "100ms",
  },
}
