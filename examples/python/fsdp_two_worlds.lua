-- examples/python/fsdp_two_worlds.py under chaos: the main process trains two models with FSDP2,
-- one over world `a` and one over world `b`, each sharded with a peer process. b's peer is
-- SIGKILLed and started again: b breaks alone, its step fails with the BrokenWorldError's text,
-- and the main process re-joins b and trains it with the restarted peer; a trains on, judged on
-- the main process's own `steps` metric (a's steps). The program knows nothing of the harness.
-- Needs torch 2.x (FSDP2).
--
--   mwchaos run examples/python/fsdp_two_worlds.lua       (python3 with multiworld_native)
local function role(name, ...)
  local argv = { "python3", "fsdp_two_worlds.py", name }
  for _, w in ipairs({ ... }) do
    local p = "${world." .. w .. "."
    -- The program joins with the scenario's options: the harness checks that it did.
    for _, a in ipairs({ "--world", w, p .. "addr}", p .. "port}", p .. "heartbeat_ms}",
                         p .. "op_timeout_ms}" }) do
      argv[#argv + 1] = a
    end
  end
  return argv
end
scenario {
  name = "FSDP2 trains on over one world while its process's other world breaks",
  -- Every role loads torch, FSDP2 and the torch._dynamo that FSDP2's first step imports before
  -- it joins (so that it steps, and answers SIGTERM, as soon as it has joined): 4.7 s on a quiet
  -- two-core machine under torch 2.15, more beside two busy loops. The warm-up covers the first
  -- steps and the fault comes 3 s after it. The restarted peer is back 11.2-13.9 s after its
  -- restart beside two busy loops (five runs), the imports nearly all of it: the bound is 24 s,
  -- and the run goes on 2 s past it.
  -- Each role has 15 s to exit once told to stop (stop_within): a torch 2.x interpreter with
  -- torch._dynamo loaded takes 1.4 s to exit on a quiet machine, three times that beside two
  -- busy loops, with all three roles exiting at once.
  duration = "36s",
  warmup = "6s",
  worlds = { a = { heartbeat = "2s" }, b = { heartbeat = "1s" } },
  roles = {
    main = { worlds = { a = 0, b = 0 }, program = role("main", "a", "b"),
              stop_within = "15s" },
    peer_a = { worlds = { a = 1 }, program = role("peer", "a"),
              stop_within = "15s" },
    peer_b = { worlds = { b = 1 }, program = role("peer", "b"),
              stop_within = "15s" },
  },
  timeline = {
    at("9s", kill("peer_b")),
    at("10s", restart("peer_b")),
  },
  expect = {
    broken = { "b" },
    detected_within = { b = "1s" },
    replacement_within = "24s",
    throughput = { throughput_kept { metric = "steps", role = "main", ratio = 0.5 } },
  },
}
