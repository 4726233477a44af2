scenario {
  name = "a program role with an unknown placeholder",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "sh", "-c", "echo ${world.w1.host}" } },
  },
}
