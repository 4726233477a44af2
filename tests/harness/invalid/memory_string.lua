-- A string doubled 27 times (128 MiB): past a small memory cap (--lua-memory-mb 16).
local s = "x"
for _ = 1, 27 do s = s .. s end
scenario { name = "never reached", worlds = {}, roles = {} }
