-- Every range at its edge, valid (docs/scenarios.md, "Numbers and strings").
scenario {
  name = "edges",
  duration = "24h", warmup = 0, startup = "1h", seed = 2^53 - 1,
  worlds = { w1 = { heartbeat = 3600, op_timeout = "24h", size = 2 },
             w2 = { heartbeat = 0.05, op_timeout = "1ms" } },
  roles = { a = { host = "h1", worlds = { w1 = 0, w2 = 0 } },
            b = { host = "h2", worlds = { w1 = 1, w2 = 1 } } },
  traffic = { gather_to_leader { world = "w1", rate = 1e6, bytes = "2GiB" },
              broadcast { world = "w2", rate = 0.001, bytes = 1, root = 1 } },
  timeline = {
    at(0, pause("b")),
    at(86400, resume("b")),
    at("86400s", delay("h1", "24h", 0)),
    at("1s", loss("h2", 0.999)),
    at("2s", failpoint("a", "mw/{backend}/send/w1", { failnum = 2^31 - 1, probability = 1 })),
  },
  expect = { detected_within = { default = 0, w1 = "24h" }, replacement_within = 86400,
             throughput = { throughput_kept { world = "w1", ratio = 10 } } },
}
