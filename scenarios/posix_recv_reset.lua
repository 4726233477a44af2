-- A POSIX-level fault is the whole process's: from 2.5 s every recv(2) of the leader fails with
-- ECONNRESET (libfiu's preload library). Gloo reads tensors with recv, and so does the store the
-- leader hosts for its worlds, so both of the leader's worlds must break, within 100 ms. Worker a
-- is in w1 and also in w3 with c: w3 must neither break nor slow down, although a lost w1.
-- The traffic is paced (200 tensors of 1 MiB a second per world): the question is whether the
-- surviving world keeps serving its load through the fault, not how it shares a saturated 2-core
-- machine with a process the fault keeps busy (unpaced, that share moved from 0.43 to 1.6 of
-- the rate before the fault from run to run).
scenario {
  name = "recv failing in one process breaks that process's worlds, no other",
  description = "posix/io/net/recv fails with ECONNRESET in the leader (w1, w2) from 2.5 s; w3 (a, c) runs on.",
  duration = "5s",
  warmup = "1s",
  worlds = {
    w1 = { heartbeat = "500ms" },
    w2 = { heartbeat = "500ms" },
    w3 = { heartbeat = "500ms" },
  },
  roles = {
    leader = { worlds = { w1 = 0, w2 = 0 } },
    a = { worlds = { w1 = 1, w3 = 0 } },
    b = { worlds = { w2 = 1 } },
    c = { worlds = { w3 = 1 } },
  },
  traffic = { gather_to_leader { worlds = { "w1", "w2", "w3" }, bytes = "1MiB", rate = 200 } },
  timeline = {
    at("2.5s", failpoint("leader", "posix/io/net/recv", { errno = "ECONNRESET" })),
  },
  expect = {
    broken = { "w1", "w2" },
    detected_within = "100ms",
    throughput = { throughput_kept { world = "w3", ratio = 0.9 } },
  },
}
