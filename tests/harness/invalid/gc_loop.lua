-- A finalizer that never returns. Lua runs finalizers with hooks off, where no time budget can stop
-- them, so the sandbox refuses them (line 4).
setmetatable({}, { __gc = function() while true do end end })
collectgarbage()
scenario { name = "never reached", worlds = {}, roles = {} }
