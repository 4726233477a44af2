-- Over real hosts (tests/hosts/ssh_launcher_test.sh): worker b on host h2 is SIGKILLed at 2 s by
-- its host's agent; only w2 breaks, w1 (leader on h0, a on h1) keeps its throughput.
local worlds, roles = star { workers = { "a", "b" }, hosts = true, world = { heartbeat = "500ms" } }
scenario {
  name = "hosts: a killed worker breaks only its world",
  duration = "4s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("2s", kill("b")) },
  expect = {
    broken = { "w2" },
    detected_within = "100ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
