-- Every range just past its edge, and past any number: each is refused.
scenario {
  name = "past the edges\0",
  duration = "86400.001s", warmup = -1, startup = 1/0, seed = 2^64,
  worlds = { w1 = { heartbeat = "1e15s", op_timeout = math.huge, size = 1e300 },
             w2 = { heartbeat = "49ms", op_timeout = 0 } },
  roles = { a = { host = "h1", worlds = { w1 = 2^63, w2 = 0 } },
            b = { host = "h2", worlds = { w1 = 1, w2 = 1 } } },
  traffic = { gather_to_leader { world = "w1", rate = 0/0, bytes = "1e300GiB" },
              broadcast { world = "w2", rate = 1e-300, bytes = 2^64, root = math.maxinteger } },
  timeline = {
    at(1e300, pause("b")),
    at("1e300s", kill("b", 1e300)),
    at(-math.huge, delay("h1", "1e300s", 0/0)),
    at("infs", loss("h2", 0/0)),
    at("nans", failpoint("a", "mw/{backend}/send/w1", { failnum = 2^64, probability = 0/0 })),
  },
  nemesis = { faults = { "pause" }, gap = "0x1p1023s", hold = -0.0, loss = 1/0 },
  expect = { detected_within = { default = 1e300, w1 = "25h" }, replacement_within = 2^53,
             throughput = { throughput_kept { world = "w1", ratio = 0/0 } } },
}
