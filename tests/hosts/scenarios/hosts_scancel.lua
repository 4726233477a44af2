-- Through Slurm (tests/hosts/slurm_launcher_test.sh): slurmctld ends the srun step that holds a
-- role's host agent (scancel_step). At 2 s b's step is cancelled (SIGTERM, then SIGKILL after
-- KillWait); at 3 s c's step gets SIGKILL (--signal=KILL). Each ends its role alone: w2 and w3
-- break, and w1 (leader and a, both on h0) keeps its throughput. A step holds all of its host's
-- roles, so b and c each have a host of their own.
local hb = { heartbeat = "500ms" }
scenario {
  name = "hosts: a cancelled Slurm step ends only its role",
  duration = "5s",
  worlds = { w1 = hb, w2 = hb, w3 = hb },
  roles = {
    leader = { worlds = { w1 = 0, w2 = 0, w3 = 0 }, host = "h0" },
    a = { worlds = { w1 = 1 }, host = "h0" },
    b = { worlds = { w2 = 1 }, host = "h1" },
    c = { worlds = { w3 = 1 }, host = "h2" },
  },
  traffic = { gather_to_leader { worlds = { "w1", "w2", "w3" }, bytes = "256KiB", rate = 200 } },
  timeline = { at("2s", scancel_step("b")), at("3s", scancel_step("c", "KILL")) },
  expect = {
    broken = { "w2", "w3" },
    detected_within = "1s",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
