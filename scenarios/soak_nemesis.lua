-- A 60 s soak under a seeded random nemesis: every 1-3 s one of a short silent partition, 10%
-- loss, a short pause (each shorter than the 1 s heartbeat timeout: nothing may break) or a
-- SIGKILL followed by a restart (the worker's world breaks and re-forms) hits worker a or b.
-- Expected: no world breaks without a fault that touches it, no hang, nothing left behind.
-- The same seed draws the same timeline (mwchaos run --seed N replays it; see the report).
local worlds, roles = star {
  workers = { "a", "b" },
  hosts = true,
  world = { heartbeat = "1s", rejoin = true },
}
scenario {
  name = "soak: a seeded random nemesis",
  description = "partition / loss / pause / kill+restart on workers a and b, drawn from the seed, for 60 s (or mwchaos run --duration).",
  duration = "60s",
  seed = 2026,
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "64KiB", rate = 200 } },
  nemesis = {
    faults = { "partition", "loss", "pause", "kill" },
    roles = { "a", "b" },
    hosts = { "h1", "h2" },
    gap = "2s",
    hold = "400ms",
  },
  expect = {},
}
