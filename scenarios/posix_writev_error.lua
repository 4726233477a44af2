-- A POSIX-level fault under Gloo's event loop: from 2.5 s every writev(2) of worker b fails with
-- EPIPE (libfiu's preload library). Gloo writes tensors with writev and, on a non-blocking
-- socket, takes EPIPE as "the reader will see the connection close": it keeps retrying and never
-- reports it, because the connection is in fact healthy. Nothing moves in w2 any more, and the
-- runtime's operation deadline (op_timeout, 1 s here) is what breaks it. b is in w2 only: w1
-- must neither break nor slow down, and every process must still stop cleanly at the end.
-- The traffic is paced (200 tensors of 1 MiB a second per world): the question is whether the
-- surviving world keeps serving its load through the fault, not how it shares a saturated 2-core
-- machine with a process the fault keeps busy (unpaced, that share moved from 0.43 to 1.6 of
-- the rate before the fault from run to run).
local worlds, roles = star {
  workers = { "a", "b" },
  world = { heartbeat = "500ms" },
  each = { w2 = { heartbeat = "500ms", op_timeout = "1s" } },
}
scenario {
  name = "writev failing under Gloo stalls its world until the operation deadline breaks it",
  description = "posix/io/rw/writev fails with EPIPE in worker b (world w2, op_timeout 1 s) from 2.5 s.",
  duration = "5s",
  warmup = "1s",
  worlds = worlds,
  roles = roles,
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "1MiB", rate = 200 } },
  timeline = {
    at("2.5s", failpoint("b", "posix/io/rw/writev", { errno = "EPIPE" })),
  },
  expect = {
    broken = { "w2" },
    detected_within = "1500ms",
    throughput = { throughput_kept { world = "w1", ratio = 0.9 } },
  },
}
