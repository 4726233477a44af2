scenario {
  name = "a program role whose program does not exist",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "./no-such-program", "--flag" } },
  },
}
