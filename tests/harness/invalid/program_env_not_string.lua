scenario {
  name = "an environment value that is not a string",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "sh" },
            env = { GOOD = "yes",
                    COUNT = 3 } },
  },
}
