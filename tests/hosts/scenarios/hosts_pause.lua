-- Over real hosts (tests/hosts/ssh_launcher_test.sh): worker b on host h2 is paused at 2 s and
-- resumed at 3.5 s by its host's agent; w2 breaks after its heartbeat timeout, w1 is untouched.
local worlds, roles = star { workers = { "a", "b" }, hosts = true, world = { heartbeat = "500ms" } }
scenario {
  name = "hosts: a paused worker breaks its world after the heartbeat timeout",
  duration = "5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("2s", pause("b")), at("3.5s", resume("b")) },
  expect = {
    broken = { "w2" },
    detected_within = { w2 = "750ms" },
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
