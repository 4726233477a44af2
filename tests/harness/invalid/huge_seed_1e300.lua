scenario {
  name = "a seed of 1e300",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  seed = 1e300,
}
