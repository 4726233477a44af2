-- There is no string.dump to make bytecode with.
local code = string.dump(function() return 1 end)
scenario { name = "never reached", worlds = {}, roles = {} }
