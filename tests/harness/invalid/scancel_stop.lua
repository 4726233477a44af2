scenario {
  name = "scancel_step with a signal that ends no step",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 }, host = "h1" }, b = { worlds = { w1 = 1 }, host = "h2" } },
  timeline = { at("1s", scancel_step("b", "SIGSTOP")) },
}
