-- A worker stopped with SIGSTOP goes silent without closing anything: its world breaks once the
-- heartbeat timeout passes (500 ms here, detected within 250 ms of it); the other world is
-- untouched, also after the worker resumes.
local worlds, roles = star { workers = { "a", "b" }, world = { heartbeat = "500ms" } }
scenario {
  name = "a paused worker breaks its world after the heartbeat timeout",
  description = "Worker b is paused at 2 s and resumed at 4 s; w2 has a 500 ms heartbeat timeout.",
  duration = "5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = {
    at("2s", pause("b")),
    at("4s", resume("b")),
  },
  expect = {
    broken = { "w2" },
    detected_within = { w2 = "750ms" },
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
