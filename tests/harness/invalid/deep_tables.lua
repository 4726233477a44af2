-- Tables nested thousands deep: a clear error, never a crash of the validator.
local t = {}
local cur = t
for _ = 1, 5000 do cur.x = {} cur = cur.x end
scenario { name = "deep", worlds = { w = { backend = "gloo", extra = t } }, roles = {} }
