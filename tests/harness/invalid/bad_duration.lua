scenario {
  name = "a heartbeat that is not a duration",
  worlds = { w1 = { heartbeat = "fast" } },
  roles = { a = { worlds = { w1 = 0 } } },
}
