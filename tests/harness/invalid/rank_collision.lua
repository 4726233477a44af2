scenario {
  name = "two roles with rank 1",
  worlds = { w1 = {} },
  roles = {
    a = { worlds = { w1 = 0 } },
    b = { worlds = { w1 = 1 } },
    c = { worlds = { w1 = 1 } },
  },
}
