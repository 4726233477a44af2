scenario {
  name = "a fault at 1e300 s (validated, it wrapped to a time near 0)",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = {
    at(1e300, kill("b")),
  },
}
