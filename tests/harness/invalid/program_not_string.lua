scenario {
  name = "a program role with a number in its command",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "sh", 3 } },
  },
}
