scenario {
  name = "a POSIX point that would cut the harness off from the worker",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = {
    at("1s", failpoint("a", "posix/io/rw/write", { errno = "EIO" })),
  },
}
