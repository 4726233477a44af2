scenario {
  name = "traffic at a rate that is not a number",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  traffic = { gather_to_leader { world = "w1",
                                 rate = 0 / 0 } },
}
