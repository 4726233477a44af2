scenario {
  name = "a world nobody joins",
  worlds = { w1 = {}, w2 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
}
