-- Two faults in different worlds at the same moment: b is killed (w2) and c's sends in w3 fail
-- with ECONNRESET. Exactly w2 and w3 break; w1 keeps its throughput.
scenario {
  name = "two faults in two worlds at once",
  description = "At 2 s: SIGKILL b (w2) and ECONNRESET on c's sends (w3).",
  duration = "4s",
  worlds = {
    w1 = { heartbeat = "500ms" },
    w2 = { heartbeat = "500ms" },
    w3 = { heartbeat = "500ms" },
  },
  roles = {
    leader = { worlds = { w1 = 0, w2 = 0, w3 = 0 } },
    a = { worlds = { w1 = 1 } },
    b = { worlds = { w2 = 1 } },
    c = { worlds = { w3 = 1 } },
  },
  traffic = { gather_to_leader { worlds = { "w1", "w2", "w3" }, bytes = "256KiB", rate = 200 } },
  timeline = {
    at("2s", kill("b")),
    at("2s", failpoint("c", "mw/{backend}/send/w3", { errno = "ECONNRESET", once = true })),
  },
  expect = {
    broken = { "w2", "w3" },
    detected_within = "100ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
