-- Over real hosts (tests/hosts/ssh_launcher_test.sh): worker b on host h2 is killed at 1.5 s and
-- started again at 2.5 s by its host's agent; it joins a fresh w2, and w1 never notices.
local worlds, roles = star {
  workers = { "a", "b" },
  hosts = true,
  world = { heartbeat = "500ms" },
  each = { w2 = { heartbeat = "500ms", rejoin = true } },
}
scenario {
  name = "hosts: a restarted worker rejoins a fresh world",
  duration = "5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("1.5s", kill("b")), at("2.5s", restart("b")) },
  expect = {
    broken = { "w2" },
    detected_within = "100ms",
    replacement_within = "3s",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
