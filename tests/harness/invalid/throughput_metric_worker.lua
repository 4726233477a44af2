scenario {
  name = "a metric of a role that runs mw_worker",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = { at("1s", kill("b")) },
  expect = {
    throughput = { throughput_kept { metric = "requests", role = "a", ratio = 0.5 } },
  },
}
