scenario {
  name = "missing a closing brace",
  worlds = { w1 = { } },
  roles = { a = { worlds = { w1 = 0 } }
