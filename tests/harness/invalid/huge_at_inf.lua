scenario {
  name = "a fault at an infinite time",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = {
    at(math.huge, kill("b")),
  },
}
