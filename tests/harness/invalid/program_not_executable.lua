scenario {
  name = "a program role whose program is not executable",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "./program_not_executable.lua", "x" } },
  },
}
