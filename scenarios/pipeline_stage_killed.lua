-- A four-stage pipeline s0 -> s1 -> s2 -> s3, one world per link. Killing the middle stage s2
-- breaks both of its links (l2, l3) and nothing upstream: l1 keeps moving.
scenario {
  name = "a middle pipeline stage dies: only its links break",
  description = "Links l1 (s0->s1), l2 (s1->s2), l3 (s2->s3); s2 is SIGKILLed at 2 s.",
  duration = "4s",
  worlds = {
    l1 = { heartbeat = "500ms" },
    l2 = { heartbeat = "500ms" },
    l3 = { heartbeat = "500ms" },
  },
  roles = {
    s0 = { worlds = { l1 = 0 } },
    s1 = { worlds = { l1 = 1, l2 = 0 } },
    s2 = { worlds = { l2 = 1, l3 = 0 } },
    s3 = { worlds = { l3 = 1 } },
  },
  traffic = { pipeline { worlds = { "l1", "l2", "l3" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("2s", kill("s2")) },
  expect = {
    broken = { "l2", "l3" },
    detected_within = "100ms",
    throughput = { throughput_kept { world = "l1", ratio = 0.9 } },
  },
}
