-- An ncclRemoteError injected into one all-reduce of world g1 (through libfiu): g1 breaks at every
-- member, g2 (same processes, same GPUs) keeps all-reducing. On a machine without a GPU, run it
-- with --backend gloo: the point becomes mw/gloo/all_reduce/g1 and the error ECONNRESET.
scenario {
  name = "an injected NCCL remote error breaks one world only",
  description = "Two 2-member all-reduce worlds over the same two processes; g1 gets ncclRemoteError.",
  -- The fault comes at 3 s, after 2 s of measured traffic: with 1 s (10 windows) before it, g2's
  -- ratio could not be told from the bar in 3 runs in a row in CI (interval [0.89, 1.14]).
  duration = "5s",
  worlds = {
    g1 = { backend = "nccl", heartbeat = "500ms" },
    g2 = { backend = "nccl", heartbeat = "500ms" },
  },
  roles = {
    p0 = { worlds = { g1 = 0, g2 = 0 } },
    p1 = { worlds = { g1 = 1, g2 = 1 } },
  },
  traffic = {
    ring_allreduce { world = "g1", bytes = "256KiB", rate = 200 },
    ring_allreduce { world = "g2", bytes = "256KiB", rate = 200 },
  },
  timeline = {
    at("3s", failpoint("p1", "mw/nccl/all_reduce/g1", { nccl = "ncclRemoteError", once = true })),
  },
  expect = {
    broken = { "g1" },
    detected_within = "200ms",
    throughput = { throughput_kept { world = "g2", ratio = 0.9 } },
  },
}
