scenario {
  name = "remove_world on a program role",
  worlds = { w1 = {} },
  roles = { app = { worlds = { w1 = 0 }, program = { "sh" } } },
  timeline = {
    at("1s", remove_world("app", "w1")),
  },
}
