scenario { name = "seed", duration = "1s" }
