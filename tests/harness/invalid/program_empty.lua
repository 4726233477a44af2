scenario {
  name = "a program role with an empty command",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = {} },
  },
}
