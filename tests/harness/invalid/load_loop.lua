-- An endless loop while the file loads: the time budget stops it (line 4).
local n = 0
while true do
  n = n + 1
end
scenario { name = "never reached", worlds = {}, roles = {} }
