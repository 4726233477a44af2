scenario {
  name = "an infinite op_timeout",
  worlds = {
    w1 = { op_timeout = math.huge },
  },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
}
