scenario {
  name = "app_checks without a program role",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  traffic = { ring_allreduce { world = "w1", bytes = "4KiB" } },
  expect = { app_checks = true },
}
