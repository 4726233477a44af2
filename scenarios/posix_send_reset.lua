-- A POSIX-level fault on the control path: from 2.5 s every send(2) of worker b fails with
-- ECONNRESET (libfiu's preload library). Gloo writes tensors with writev, so b's tensor traffic
-- is not what fails first: the runtime's link to each world's store sends heartbeats with send,
-- and a link that cannot send is a lost member. b is in w2 only, so w2 must break, at b and at
-- the leader, within 200 ms (b's next heartbeat is due within heartbeat / 10 = 50 ms); w1 must
-- neither break nor slow down, and every process must still stop cleanly at the end.
-- The traffic is paced (200 tensors of 1 MiB a second per world): the question is whether the
-- surviving world keeps serving its load through the fault, not how it shares a saturated 2-core
-- machine with a process the fault keeps busy (unpaced, that share moved from 0.43 to 1.6 of
-- the rate before the fault from run to run).
local worlds, roles = star { workers = { "a", "b" }, world = { heartbeat = "500ms" } }
scenario {
  name = "send failing in one process breaks that process's world through its store link",
  description = "posix/io/net/send fails with ECONNRESET in worker b (world w2) from 2.5 s; w1 runs on.",
  duration = "5s",
  warmup = "1s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "1MiB", rate = 200 } },
  timeline = {
    at("2.5s", failpoint("b", "posix/io/net/send", { errno = "ECONNRESET" })),
  },
  expect = {
    broken = { "w2" },
    detected_within = "200ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
