-- PUT 64 KiB bodies, rotating over 64 names per wrk thread (no two in flight share one).
local counter = 0
local ids = 0
function setup(thread)
  ids = ids + 1
  thread:set("tid", ids)
end
function init(args)
  local size = tonumber(args[1] or "65536")
  body = string.rep("x", size)
end
function request()
  counter = counter + 1
  local path = "/up/t" .. tid .. "-" .. (counter % 64)
  return wrk.format("PUT", path, {["Content-Type"] = "application/octet-stream"}, body)
end
