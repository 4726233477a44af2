-- A one-way partition: packets from h2 (worker b) to h0 (the leader, w2's store host) are dropped,
-- those from h0 to h2 still arrive. b's heartbeats never reach the store, so the store declares b
-- silent after w2's heartbeat timeout and w2 breaks; w1 is untouched. b itself learns later: with
-- its ACKs dropped, the store's pings to it stall too, and b declares the store silent up to one
-- more timeout after that (measured: leader 0.5 s, b 0.5-0.73 s).
local worlds, roles = star {
  workers = { "a", "b" },
  hosts = true,
  world = { heartbeat = "500ms" },
}
scenario {
  name = "a one-way partition silences a worker",
  description = "DROP of h2 -> h0 only, at 3 s; w2 heartbeat 500 ms.",
  -- The traffic is paced (200 operations/s): w1's verdict asks whether the survivor keeps serving
  -- its load, not how a saturated CPU is shared. Unpaced, beside two CPU hogs, w1's windows jumped
  -- between levels 3x apart after the fault as the scheduler placed the remaining threads anew
  -- (docs/testing.md, "Hunt 3"). The fault comes at 3 s, after 2 s of measured traffic.
  duration = "5s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("3s", partition { a = { "h2" }, b = { "h0" }, oneway = true }) },
  expect = {
    broken = { "w2" },
    detected_within = "1250ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
