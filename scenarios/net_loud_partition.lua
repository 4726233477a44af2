-- A loud partition: every TCP packet between h2 and the other hosts is answered with a reset, so
-- a connection fails (ECONNRESET) as soon as anything is sent on it. The store pings each member
-- every heartbeat interval (timeout / 10 = 50 ms here), so w2 breaks within 100 ms; w1 does not.
local worlds, roles = star {
  workers = { "a", "b" },
  hosts = true,
  world = { heartbeat = "500ms" },
}
scenario {
  name = "a loud partition breaks its world at once",
  description = "iptables REJECT --reject-with tcp-reset between h2 and the others at 2 s.",
  duration = "4s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB" } },
  timeline = { at("2s", partition { a = { "h2" }, b = { "h0", "h1" }, mode = "loud" }) },
  expect = {
    broken = { "w2" },
    detected_within = "100ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.8 } },
  },
}
