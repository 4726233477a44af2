scenario {
  name = "a POSIX failpoint on a program role",
  worlds = { w1 = {} },
  roles = { app = { worlds = { w1 = 0 }, program = { "sh" } } },
  timeline = {
    at("1s", failpoint("app", "posix/io/net/send", { errno = "ECONNRESET" })),
  },
}
