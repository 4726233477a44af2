-- examples/python/ddp_two_worlds.py under chaos: the main process trains with DDP over world
-- `train` (with the trainer) and answers the client's requests over world `serve`. The client is
-- SIGKILLed and started again, then paused past serve's heartbeat timeout and resumed: serve
-- breaks each time and the main process re-creates it; DDP trains on with no error, judged on
-- its own `steps` metric. The program knows nothing of the harness.
--
--   mwchaos run examples/python/ddp_two_worlds.lua        (python3 with multiworld_native)
local function role(name, ...)
  local argv = { "python3", "ddp_two_worlds.py", name }
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
  name = "DDP trains on while its process's serving world breaks",
  -- The restarted client is back when it has imported torch again (1.8 s on a quiet two-core
  -- machine, 2.2-3.0 s beside two busy loops, more under torch 2.x) and joined: it is paused 6 s
  -- after its restart, once it is surely back, so that the pause breaks a formed world. torch
  -- 2.15's DDP imports more on its first use: once its main role made no step before 3 s, so the
  -- warm-up ends at 4 s and the kill comes at 5 s.
  duration = "16s",
  warmup = "4s",
  worlds = { train = { heartbeat = "2s" }, serve = { heartbeat = "500ms" } },
  roles = {
    main = { worlds = { train = 0, serve = 0 }, program = role("main", "train", "serve") },
    trainer = { worlds = { train = 1 }, program = role("trainer", "train") },
    client = { worlds = { serve = 1 }, program = role("client", "serve") },
  },
  timeline = {
    at("5s", kill("client")),
    at("6s", restart("client")),
    at("12s", pause("client")),
    at("13s", resume("client")),
  },
  expect = {
    broken = { "serve" },
    detected_within = { serve = "1s" },
    replacement_within = "6s",
    throughput = { throughput_kept { metric = "steps", role = "main", ratio = 0.5 } },
  },
}
