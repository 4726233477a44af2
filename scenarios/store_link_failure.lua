-- The connection between worker b and its world's store fails (ETIMEDOUT injected on the member
-- link): the store announces b's loss, w2 breaks everywhere at once; w1 is untouched.
local worlds, roles = star { workers = { "a", "b" }, world = { heartbeat = "500ms" } }
scenario {
  name = "a member's store connection fails: only its world breaks",
  description = "ETIMEDOUT injected into b's link to the store of w2 at 2 s.",
  duration = "4s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = {
    at("2s", failpoint("b", "mw/store/link/w2", { errno = "ETIMEDOUT", once = true })),
  },
  expect = {
    broken = { "w2" },
    -- the link is checked at each heartbeat (every 50 ms here)
    detected_within = "150ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
