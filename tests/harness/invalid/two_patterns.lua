scenario {
  name = "two traffic patterns on one world",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  traffic = {
    broadcast { world = "w1" },
    ring_allreduce { worlds = { "w1" } },
  },
}
