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
  -- The restarted client is back when it has imported torch again and joined: 1.8 s on a quiet
  -- two-core machine under torch 1.13; under torch 2.15 beside two busy loops 6.9-9.4 s (six
  -- runs), the import nearly all of it. The bound is 16 s, and the client is paused then, 16 s
  -- after its restart, so that the pause breaks a formed world. The training roles load what DDP
  -- needs before they join (torch 2.x's DDP imports torch._dynamo when first built: 5 s and more
  -- beside two busy loops), so main steps from the start; the warm-up still gives its step rate
  -- 4 s to settle before the kill at 5 s.
  -- Each role has 15 s to exit once told to stop (stop_within): a torch 2.x interpreter with
  -- torch._dynamo loaded takes 1.4 s to exit on a quiet machine, three times that beside two
  -- busy loops, with all three roles exiting at once.
  duration = "26s",
  warmup = "4s",
  worlds = { train = { heartbeat = "2s" }, serve = { heartbeat = "500ms" } },
  roles = {
    main = { worlds = { train = 0, serve = 0 }, program = role("main", "train", "serve"),
              stop_within = "15s" },
    trainer = { worlds = { train = 1 }, program = role("trainer", "train"),
              stop_within = "15s" },
    client = { worlds = { serve = 1 }, program = role("client", "serve"),
              stop_within = "15s" },
  },
  timeline = {
    at("5s", kill("client")),
    at("6s", restart("client")),
    at("22s", pause("client")),
    at("23s", resume("client")),
  },
  expect = {
    broken = { "serve" },
    detected_within = { serve = "1s" },
    replacement_within = "16s",
    throughput = { throughput_kept { metric = "steps", role = "main", ratio = 0.5 } },
    -- Every answer the client checked (report_check) matched its own copy of the model.
    app_checks = true,
  },
}
