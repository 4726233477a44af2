-- A table that contains itself: a clear error, never a crash of the validator.
local t = { backend = "gloo" }
t.self = t
scenario { name = "cycle", worlds = { w = t }, roles = {} }
