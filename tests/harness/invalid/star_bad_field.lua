local worlds, roles = star { workers = { "a" }, heartbeat = "500ms" }
scenario { name = "star with a field it does not take", worlds = worlds, roles = roles }
