scenario {
  name = "a program role whose working directory does not exist",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "sh" },
            cwd = "no-such-directory" },
  },
}
