scenario {
  name = "scancel_step of a role without a host",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  timeline = { at("1s", scancel_step("b")) },
}
