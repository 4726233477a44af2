scenario {
  name = "a program argument with a NUL byte (execve would cut it at the NUL)",
  worlds = { w1 = {} },
  roles = {
    app = { worlds = { w1 = 0 },
            program = { "/bin/echo", "a\0b" } },
  },
}
