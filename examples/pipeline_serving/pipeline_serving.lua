-- examples/pipeline_serving/serve.py under chaos: a front end streams requests through two
-- stage replicas (torch CPU tensors, a linear layer each), one world per replica. Replica b is
-- SIGKILLed and started again: requests keep flowing through a, and the front end re-creates s2,
-- which the restarted b joins. The program knows nothing of the harness.
--
--   mwchaos run examples/pipeline_serving/pipeline_serving.lua     (python3 with multiworld_native)
local function world(name)
  local w = "${world." .. name .. "."
  -- The program joins with the scenario's options: the harness checks that it did.
  return { "--world", name, w .. "addr}", w .. "port}", w .. "heartbeat_ms}", w .. "op_timeout_ms}" }
end
local function serve(role, ...)
  local argv = { "python3", "serve.py", role }
  for _, w in ipairs({ ... }) do
    for _, a in ipairs(world(w)) do argv[#argv + 1] = a end
  end
  return argv
end
scenario {
  name = "pipeline serving: a stage replica dies and comes back",
  -- A restarted replica is back when it has imported torch again and joined: 1.8 s on a quiet
  -- two-core machine under torch 1.13, 2.2-3.0 s beside two busy loops; under torch 2.15 beside
  -- two busy loops, with the front end and replica a taking a core between them, up to 6 s. 10 s
  -- from its restart holds that with room, and the run lasts 2 s past it.
  duration = "17s",
  warmup = "2s",
  worlds = { s1 = { heartbeat = "500ms" }, s2 = { heartbeat = "500ms" } },
  roles = {
    frontend = { worlds = { s1 = 0, s2 = 0 }, program = serve("frontend", "s1", "s2") },
    a = { worlds = { s1 = 1 }, program = serve("stage", "s1") },
    b = { worlds = { s2 = 1 }, program = serve("stage", "s2") },
  },
  timeline = { at("4s", kill("b")), at("5s", restart("b")) },
  expect = {
    broken = { "s2" },
    detected_within = "500ms",
    replacement_within = "10s",
    throughput = { throughput_kept { metric = "requests", role = "frontend", ratio = 0.3 } },
    -- Every answer the front end checked (report_check) matched the model's.
    app_checks = true,
    check = function(run)
      local s = run.series.s2 and run.series.s2.frontend
      if not s then return false, "no metrics for s2 at the front end" end
      local after = 0
      for i, t in ipairs(s.t_s) do
        if s.generation[i] >= 2 then after = after + s.ops[i] end
      end
      return after > 0, string.format("%d operations in s2's new generation", after)
    end,
  },
}
