scenario {
  name = "a POSIX point without the errno its call fails with",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = {
    at("1s", failpoint("a", "posix/io/net/recv", { failnum = 1 })),
  },
}
