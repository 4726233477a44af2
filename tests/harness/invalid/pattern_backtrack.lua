-- A pattern that backtracks for ages (Lua's own matcher would take years over these 40 letters):
-- the step budget ends the call at once, and the error names the line (5).
local subject = ("a"):rep(40)
local pattern = ("a*"):rep(40) .. "b"
local found = subject:find(pattern)
scenario { name = "never reached", worlds = {}, roles = {} }
