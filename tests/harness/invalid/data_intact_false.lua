scenario {
  name = "data_intact turned off without a reason",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  traffic = { ring_allreduce { world = "w1", bytes = "4KiB" } },
  expect = { data_intact = false },
}
