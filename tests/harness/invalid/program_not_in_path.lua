scenario {
  name = "a program role whose program is not in PATH",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "mw-no-such-program-anywhere" } },
  },
}
