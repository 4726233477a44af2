scenario {
  name = "a fault after the end",
  duration = "5s",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = {
    at("1s", pause("b")),
    at("9s", kill("b")),
  },
}
