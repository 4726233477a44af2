-- A table grown to 8 million entries (128 MiB), every error caught: past a small memory cap
-- (--lua-memory-mb 16) it keeps failing, and the last failure is the file's error.
local t = {}
for i = 1, 8000000 do
  local ok, err = pcall(function() t[i] = i end)
  if not ok then error(err, 0) end
end
scenario { name = "never reached", worlds = {}, roles = {} }
