scenario {
  name = "a placeholder for a world the role is not in",
  worlds = { w1 = {}, w2 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "sh", "-c", "echo ${world.w2.port}" } },
    b = { worlds = { w2 = 0 } },
  },
}
