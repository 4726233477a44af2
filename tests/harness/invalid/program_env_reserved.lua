scenario {
  name = "a program role that sets a variable the harness sets",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "sh" },
            env = { MW_TELEMETRY_FD = "4" } },
  },
}
