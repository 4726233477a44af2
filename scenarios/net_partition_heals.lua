-- A silent partition that heals after 300 ms, well inside the 2 s heartbeat timeout: TCP
-- retransmits what was dropped and no world breaks.
--
-- Why 2 s and not 1 s: TCP retransmits a dropped segment 0.2, 0.6 and 1.4 s after it was first
-- sent (RTO 200 ms, doubling). A heal that lands after the 0.6 s retransmission gets through only
-- at 1.4 s, so a 300 ms partition can silence a link for 1.4 s. Beside two CPU hogs the heal's
-- iptables commands took long enough for that, and a 1 s heartbeat expired at 1.1 s (1 of 5 runs
-- of tests/flake_hunt.sh). 2 s holds a heal that lands up to 1.4 s late.
local worlds, roles = star { workers = { "a", "b" }, hosts = true, world = { heartbeat = "2s" } }
scenario {
  name = "a partition that heals before the timeout breaks nothing",
  description = "DROP between h2 and h0 at 2 s, healed at 2.3 s; heartbeat timeout 2 s.",
  -- 5 s: a heal that failed would break w2 about 4.1 s in (2 s after the partition), and must be
  -- seen within the run.
  duration = "5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "64KiB" } },
  timeline = {
    at("2s", partition { a = { "h2" }, b = { "h0" } }),
    at("2.3s", heal()),
  },
  expect = { broken = {} },
}
