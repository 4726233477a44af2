scenario {
  name = "env on an mw_worker role",
  worlds = { w1 = {} },
  roles = {
    a = { worlds = { w1 = 0 },
          env = { X = "1" } },
  },
}
