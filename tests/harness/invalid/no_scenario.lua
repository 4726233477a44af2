-- defines nothing
local x = 1
