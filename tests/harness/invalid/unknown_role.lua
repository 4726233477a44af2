scenario {
  name = "a fault for a role that does not exist",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = {
    at("1s", kill("nobody")),
  },
}
