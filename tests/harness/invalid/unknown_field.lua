scenario {
  name = "misspelled field",
  worlds = { w1 = { heartbeet = "500ms" } },
  roles = { a = { worlds = { w1 = 0 } } },
}
