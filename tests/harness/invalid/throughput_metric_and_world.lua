scenario {
  name = "a world and a metric in one throughput_kept",
  worlds = { w1 = {} },
  roles = { app = { worlds = { w1 = 0 }, program = { "sh" } }, b = { worlds = { w1 = 1 } } },
  timeline = { at("1s", kill("b")) },
  expect = {
    throughput = { throughput_kept { world = "w1", metric = "requests", role = "app" } },
  },
}
