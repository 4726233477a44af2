scenario {
  name = "a seed of 2^64 (past what a uint64_t holds)",
  seed = 2 ^ 64,
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
}
