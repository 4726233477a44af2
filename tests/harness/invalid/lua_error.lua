local sizes = { 1, 2 }
local total = sizes[1] + sizes[3]  -- nil arithmetic
scenario { name = "never reached", worlds = {}, roles = {} }
