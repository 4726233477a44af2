scenario {
  name = "a heartbeat of 1e15 s (the runtime refuses it only 30 s into the run)",
  worlds = { w1 = { heartbeat = "1e15s" } },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
}
