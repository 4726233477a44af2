scenario {
  name = "a bandwidth rate of more than one word",
  worlds = { w1 = {} },
  roles = { a = { host = "h1", worlds = { w1 = 0 } }, b = { host = "h2", worlds = { w1 = 1 } } },
  timeline = { at("1s", bandwidth("h2", "10mbit burst 1")) },
}
