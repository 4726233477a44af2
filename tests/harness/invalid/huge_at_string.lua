scenario {
  name = "a fault at 1e300 s written as a string",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = {
    at("1e300s", kill("b")),
  },
}
