-- The C++ pipeline example (examples/pipeline_app.cc) under chaos: a front end and two stage
-- replicas, each replica in a world of its own with the front end. Replica b is SIGKILLed and
-- started again: requests keep flowing through a, and the front end re-creates s2, which the
-- restarted b joins. The program knows nothing of the harness: the runtime in it reports its
-- worlds, and mw::reportMetric("requests") its own metric.
--
--   PATH=build/release/examples:$PATH mwchaos run examples/pipeline_app.lua
-- NAME,ADDR,PORT,HEARTBEAT_MS,OP_TIMEOUT_MS: the program joins with the scenario's world options.
local function world(name)
  local w = "${world." .. name .. "."
  return name .. "," .. w .. "addr}," .. w .. "port}," .. w .. "heartbeat_ms}," .. w .. "op_timeout_ms}"
end
scenario {
  name = "pipeline app: a stage replica dies and comes back",
  duration = "6s",
  warmup = "1s",
  worlds = { s1 = { heartbeat = "500ms" }, s2 = { heartbeat = "500ms" } },
  roles = {
    frontend = { worlds = { s1 = 0, s2 = 0 },
                 program = { "pipeline_app", "frontend", "--world", world("s1"), "--world", world("s2") } },
    a = { worlds = { s1 = 1 }, program = { "pipeline_app", "stage", "--world", world("s1") } },
    b = { worlds = { s2 = 1 }, program = { "pipeline_app", "stage", "--world", world("s2") } },
  },
  timeline = { at("2.5s", kill("b")), at("3.5s", restart("b")) },
  expect = {
    broken = { "s2" },
    detected_within = "500ms",
    replacement_within = "3s",
    -- The front end's own metric: requests served per second, through a alone for a while.
    throughput = { throughput_kept { metric = "requests", role = "frontend", ratio = 0.3 } },
    -- Every answer the front end checked (mw::reportCheck) was twice its request plus one.
    app_checks = true,
    check = function(run)
      local s = run.series.s2 and run.series.s2.frontend
      if not s then return false, "no metrics for s2 at the front end" end
      local after = 0
      for i, t in ipairs(s.t_s) do
        if t > 4 and s.generation[i] >= 2 then after = after + s.ops[i] end
      end
      return after > 0, string.format("%d operations in s2's new generation after 4 s", after)
    end,
  },
}
