-- Through Slurm (tests/hosts/slurm_launcher_test.sh): a partition between h1 (b's host) and h2
-- (c's) is in force when slurmctld sends b's step SIGUSR1 (scancel_step(role, "USR1")): the
-- agent there catches it, removes its firewall rules first, kills its roles and exits. b's world
-- w2 breaks; w1 (leader and a, both on h0) keeps its throughput; w3 (leader and c) crosses no cut;
-- and nothing of the partition is left on h1 (the test looks).
local hb = { heartbeat = "500ms" }
scenario {
  name = "hosts: SIGUSR1 to a step during a partition cleans its host up",
  duration = "6s",
  worlds = { w1 = hb, w2 = hb, w3 = hb },
  roles = {
    leader = { worlds = { w1 = 0, w2 = 0, w3 = 0 }, host = "h0" },
    a = { worlds = { w1 = 1 }, host = "h0" },
    b = { worlds = { w2 = 1 }, host = "h1" },
    c = { worlds = { w3 = 1 }, host = "h2" },
  },
  traffic = { gather_to_leader { worlds = { "w1", "w2", "w3" }, bytes = "256KiB", rate = 200 } },
  timeline = {
    at("2s", partition { a = { "h1" }, b = { "h2" } }),
    at("3s", scancel_step("b", "USR1")),
  },
  expect = {
    broken = { "w2" },
    detected_within = "1s",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
