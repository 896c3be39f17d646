-- wrk paced below saturation (benchmarks/proxy.py, decision 0069): each connection waits
-- the milliseconds given after `--` after every answer before it sends the next request.
local wait = 0

function init(args)
    wait = tonumber(args[1])
end

function delay()
    return wait
end
