scenario {
  name = "traffic in a world with a program role",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 }, program = { "sh" } },
    b = { worlds = { w1 = 1 } },
  },
  traffic = {
    gather_to_leader { worlds = { "w1" } },
  },
}
