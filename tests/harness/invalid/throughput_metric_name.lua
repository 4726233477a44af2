scenario {
  name = "a metric name the protocol cannot carry",
  worlds = { w1 = {} },
  roles = { app = { worlds = { w1 = 0 }, program = { "sh" } }, b = { worlds = { w1 = 1 } } },
  timeline = { at("1s", kill("b")) },
  expect = {
    throughput = { throughput_kept { metric = "two words", role = "app" } },
  },
}
