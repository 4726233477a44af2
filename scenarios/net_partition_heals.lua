-- A silent partition that heals after 300 ms, well inside the 1 s heartbeat timeout: TCP
-- retransmits what was dropped and no world breaks.
local worlds, roles = star { workers = { "a", "b" }, hosts = true, world = { heartbeat = "1s" } }
scenario {
  name = "a partition that heals before the timeout breaks nothing",
  description = "DROP between h2 and h0 at 2 s, healed at 2.3 s; heartbeat timeout 1 s.",
  duration = "4s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "64KiB" } },
  timeline = {
    at("2s", partition { a = { "h2" }, b = { "h0" } }),
    at("2.3s", heal()),
  },
  expect = { broken = {} },
}
