scenario {
  name = "scancel_step of a role that shares its host",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 }, host = "h1" }, b = { worlds = { w1 = 1 }, host = "h2" },
            c = { worlds = { w1 = 2 }, host = "h2" } },
  timeline = { at("1s", scancel_step("b")) },
}
