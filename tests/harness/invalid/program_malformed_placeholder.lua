scenario {
  name = "a placeholder without its closing brace",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "sh" },
            env = { PORT = "${world.w1.port" } },
  },
}
