-- A silent partition that heals after 300 ms, well inside the 1 s heartbeat timeout: TCP
-- retransmits what was dropped and no world breaks.
scenario {
  name = "a partition that heals before the timeout breaks nothing",
  description = "DROP between h2 and h0 at 2 s, healed at 2.3 s; heartbeat timeout 1 s.",
  duration = "4s",
  worlds = {
    w1 = { heartbeat = "1s" },
    w2 = { heartbeat = "1s" },
  },
  roles = {
    leader = { host = "h0", worlds = { w1 = 0, w2 = 0 } },
    a = { host = "h1", worlds = { w1 = 1 } },
    b = { host = "h2", worlds = { w2 = 1 } },
  },
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "64KiB" } },
  timeline = {
    at("2s", partition { a = { "h2" }, b = { "h0" } }),
    at("2.3s", heal()),
  },
  expect = { broken = {} },
}
