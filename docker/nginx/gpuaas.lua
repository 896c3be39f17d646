-- The nginx data plane's hot path (docker/nginx.conf, decision 0018): the portal's
-- grants kept in shared memory, and the upstream chosen per request so that nginx
-- can keep connections to the apps alive.
--
-- authorize() runs in the rewrite phase of an app route (app.conf). A grant is the
-- portal's 204 to /_gpuaas/auth (apps.proxy.authrequest): its x-gpuaas-* headers
-- become the $gpuaas_* variables the configuration proxies with. Grants are kept per
-- route cookie, host and route path for the answer's max-age; after that, for its
-- stale-while-revalidate, one request asks again while the others still use the old
-- grant. Refusals are never kept, and remove the grant they answer. A WebSocket
-- handshake is always asked afresh (its Origin is checked) and never kept, and is
-- relayed by the portal's own proxy, which closes the socket when access ends
-- (decision 0021): nginx cannot close a connection it has upgraded.
--
-- A granted request is then counted against its route's connection limits, per app
-- instance and per user, and release() gives the count back when it ends.

local balancer = require "ngx.balancer"
local ffi = require "ffi"

-- glibc's memmem skips ahead by about the needle's length (a Horspool variant):
-- string.find stops at every occurrence of the needle's first character, so the
-- cost of scanning a page for a token depended on which character the token
-- started with (1k to 6k instructions on one 1.4 KB page).
pcall(ffi.cdef, "void *memmem(const void *, size_t, const void *, size_t);")
local memmem = ffi.C.memmem

local grants = ngx.shared.gpuaas_grants
local connections = ngx.shared.gpuaas_connections
local capture = ngx.location.capture
local now = ngx.now
local exit = ngx.exit
local var = ngx.var
local concat = table.concat
local find = string.find
local match = string.match
local format = string.format
local sub = string.sub
local gsub = string.gsub
local re_gsub = ngx.re.gsub
local lower = string.lower
local rep = string.rep
local max = math.max
local min = math.min
local tonumber = tonumber

local M = {}

-- The grant's headers, in the order a grant is stored: first those that become
-- variables (VARIABLES), then those only this code reads.
local HEADERS = {
    "x-gpuaas-upstream",
    "x-gpuaas-public-prefix",
    "x-gpuaas-rewrite-from",
    "x-gpuaas-forwarded-prefix",
    "x-gpuaas-frame-ancestors",
    "x-gpuaas-upstream-prefix",
    "x-gpuaas-authorization",
    "x-gpuaas-passthrough",
    "x-gpuaas-upstream-addr",
    "x-gpuaas-instance",
    "x-gpuaas-instance-limit",
    "x-gpuaas-user",
    "x-gpuaas-user-limit",
    "x-gpuaas-redact",
}
-- Short names: nginx lowercases and hashes a variable's name on every access from
-- Lua, and this code sets up to ten of them per request (nginx.conf declares them).
local VARIABLES = { "g_upstream", "g_public", "g_from", "g_forwarded", "g_frame" }
local COUNT = #VARIABLES
-- Names the stored form (below): a grant stored by a configuration with other HEADERS
-- (the shared dictionary outlives `nginx -s reload`) is not read, but asked again.
local FORMAT = tostring(ngx.crc32_short(concat(HEADERS, " ")))

-- This worker's copy of fresh grants, by key: a fresh grant is used without a trip to
-- shared memory. The copy expires with the shared grant, and a shared grant is only
-- replaced, or taken away by a refusal, once it is no longer fresh: the copy never
-- says more than the shared dictionary. Emptied when it grows past a bound.
local fresh, fresh_count = {}, 0
local FRESH_MAX = 4096

local function split(text, separator)
    local parts, start = {}, 1
    while true do
        local at = find(text, separator, start, true)
        if not at then
            parts[#parts + 1] = sub(text, start)
            return parts
        end
        parts[#parts + 1] = sub(text, start, at - 1)
        start = at + 1
    end
end

-- Stored form: "FORMAT\nfresh-until\n" and the headers' values in HEADERS' order, one
-- a line (header values hold no newline). Nil for another format.
local function parse(stored)
    local grant = split(stored, "\n")
    if table.remove(grant, 1) ~= FORMAT then
        return nil
    end
    grant.fresh_until = tonumber(table.remove(grant, 1))
    grant.upstream_prefix = grant[COUNT + 1]
    grant.authorization = grant[COUNT + 2]
    grant.passthrough = grant[COUNT + 3] == "1"
    grant.addresses = split(grant[COUNT + 4], " ")
    grant.port = tonumber(grant[1]:match(":(%d+)$"))
    grant.instance_key = "instance:" .. grant[COUNT + 5]
    grant.instance_limit = tonumber(grant[COUNT + 6])
    grant.user_key = "user:" .. grant[COUNT + 7]
    grant.user_limit = tonumber(grant[COUNT + 8])
    grant.counted = grant.instance_key .. "\n" .. grant.user_key
    local secret = grant[COUNT + 9]
    if secret ~= "" then
        grant.secret = secret
        grant.secret_pattern = gsub(secret, "%W", "%%%0")  -- found as it is
        grant.mask = rep("x", #secret)
    end
    return grant
end

local function remember(key, grant)
    if fresh_count >= FRESH_MAX then
        fresh, fresh_count = {}, 0
    end
    if not fresh[key] then
        fresh_count = fresh_count + 1
    end
    fresh[key] = grant
end

-- The path sent upstream, from the raw request URI (never the decoded one) and the
-- route's prefixes (apps.proxy.access.Target.upstream_path): on a path_prefix route
-- the public prefix is replaced by the upstream's; on an app host a path already
-- under the upstream's prefix is kept, any other is put under it.
local function upstream_uri(grant, uri)
    local public, upstream = grant[2], grant.upstream_prefix
    if public ~= "/" then
        if sub(uri, 1, #public) == public then
            return upstream .. sub(uri, #public + 1)
        end
        return ""
    end
    if sub(uri, 1, #upstream) == upstream then
        return uri
    end
    if sub(uri, 1, 1) == "/" then
        return upstream .. sub(uri, 2)
    end
    return ""
end

-- The platform's cookies (portal session, CSRF token, route session) never reach an
-- app; its own cookies do.
local PLATFORM_COOKIES = [[(?:^|;)\s*(?:_gpuaas_route|sessionid|csrftoken)=[^;]*]]

local function app_cookies(cookies)
    if not cookies then
        return ""
    end
    cookies = re_gsub(cookies, PLATFORM_COOKIES, "", "jo")
    return (gsub(cookies, "^;%s*", ""))
end

-- The route cookie and the Cookie header sent upstream. A browser that holds only the
-- route cookie (an app host's usual case) is answered without nginx's cookie parser
-- or a regular expression: its one cookie has no separator and nothing for the app.
local ROUTE_COOKIE = "_gpuaas_route="

local function cookies()
    local header = var.http_cookie
    if header and sub(header, 1, #ROUTE_COOKIE) == ROUTE_COOKIE
        and not find(header, ";", 1, true) and not find(header, ",", 1, true) and not find(header, " ", 1, true) then
        return sub(header, #ROUTE_COOKIE + 1), ""
    end
    return var.cookie__gpuaas_route or "", app_cookies(header)
end

-- On the portal's host, the route's path (/w/{instance}/{endpoint}/), found without
-- a pattern: string.match would keep LuaJIT from compiling the request's path.
local function route_path(uri)
    if sub(uri, 1, 3) ~= "/w/" then
        return ""
    end
    local instance_end = find(uri, "/", 4, true)
    if not instance_end or instance_end == 4 then
        return ""
    end
    local endpoint_end = find(uri, "/", instance_end + 1, true)
    if not endpoint_end or endpoint_end == instance_end + 1 then
        return ""
    end
    local query = find(uri, "?", 4, true)
    if query and query < endpoint_end then
        return ""
    end
    return sub(uri, 1, endpoint_end)
end

-- Connections are counted in shared memory, so the limits hold across workers. A key
-- at 0 stays: deleting it would race a count made in another worker in between, and
-- lose it. The dictionary keeps one small entry per instance and user seen since
-- nginx started (4 MB holds tens of thousands); when full, it evicts the least
-- recently used, and a key at 0 is touched by nothing.
local function give_back(key)
    connections:incr(key, -1)
end

-- Counts the request on its instance and its user or, when either is at its limit,
-- counts nothing and ends the request with 429 (ngx.exit does not return here; the
-- location's error_page asks the portal for the page). What was counted is kept in
-- $g_counted as well as in the grant apply() leaves in ngx.ctx: an error_page (a 502
-- or 504 page) or the handover of a WebSocket redirects the request internally, which
-- empties ngx.ctx before release() runs.
local function count(grant)
    local instance, user = grant.instance_key, grant.user_key
    local instances = connections:incr(instance, 1, 0)
    local users = connections:incr(user, 1, 0)
    if instances > grant.instance_limit or users > grant.user_limit then
        give_back(instance)
        give_back(user)
        return exit(429)
    end
    var.g_counted = grant.counted
end

-- Sets one of the request's variables, or leaves it unset when the value is empty or
-- absent: nginx reads an unset variable as empty, and each set costs some 300-400
-- instructions.
local function set(name, value)
    if value and value ~= "" then
        var[name] = value
    end
end

-- The browser's Range on a route with a secret (apps.proxy.dataplane.ranges): when it
-- asks for one range, the app is asked for it widened by the secret's length less one
-- on each side, and cut() and mask() send the asked part of the masked bytes. Returns
-- the asked range, or nil: the app is asked for the whole body.
local function widen(grant, value)
    local first, last = match(value, "^%s*[Bb][Yy][Tt][Ee][Ss]%s*=%s*(%d*)%s*%-%s*(%d*)%s*$")
    if not first then
        return nil
    end
    local margin = #grant.secret - 1
    first, last = tonumber(first), tonumber(last)
    local asked
    if first then
        if last and last < first then
            return nil
        end
        asked = { first = first, last = last }
        var.g_range = last and format("bytes=%d-%d", max(0, first - margin), last + margin)
            or format("bytes=%d-", max(0, first - margin))
    elseif last and last > 0 then
        asked = { suffix = last }
        var.g_range = format("bytes=-%d", last + margin)
    end
    return asked
end

local function apply(grant, uri, app_cookie)
    count(grant)
    for i = 1, COUNT do
        set(VARIABLES[i], grant[i])
    end
    -- The path goes as the browser sent it (app.conf's plain proxy_pass) unless the
    -- route changes it: a proxy_pass with a variable parses its URL on every request.
    -- A widened range goes by app.conf's `if ($g_ranged)`, whose proxy_pass has it.
    local upstream = upstream_uri(grant, uri)
    local range = grant.secret and var.http_range
    local asked = range and widen(grant, range)
    if asked then
        ngx.ctx.gpuaas_asked = asked
        var.g_ranged = "1"
        var.g_uri = upstream
    elseif upstream ~= uri then
        set("g_uri", upstream)
    end
    set("g_cookie", app_cookie)
    -- The browser's Authorization goes upstream only on bearer_passthrough routes;
    -- elsewhere it is the route's bridge header, or nothing.
    local authorization = grant.authorization
    if grant.passthrough then
        authorization = var.http_authorization
    end
    set("g_auth", authorization)
    -- The secret itself is never in a variable, where a log format could reach it.
    if grant.secret then
        var.g_masked = "1"
    end
    ngx.ctx.gpuaas = grant
end

-- Asks the portal. Returns the grant's stored form and how long to keep it (fresh,
-- then stale), or the status of a refusal or of a portal that did not answer, or did
-- not answer with every header of a grant (web replicas older than this nginx). A 308
-- (a route's own path without its slash) is the browser's answer, and ends here.
local function ask()
    local answer = capture("/_gpuaas/auth")
    local headers = {}
    for name, value in pairs(answer.header) do
        headers[lower(name)] = value
    end
    if answer.status ~= 204 then
        if answer.status == 308 and headers.location then
            ngx.redirect(headers.location, 308)  -- does not return
        end
        if answer.status ~= 401 and answer.status ~= 403 then
            ngx.log(ngx.ERR, "the portal's /_gpuaas/auth answered ", answer.status, ": nothing is proxied")
        end
        return nil, answer.status
    end
    local values = {}
    for i, name in ipairs(HEADERS) do
        values[i] = headers[name]
        if not values[i] then
            ngx.log(ngx.ERR, "the portal's grant has no ", name, ": nothing is proxied ",
                    "(web replicas older than this nginx: upgrade them first)")
            return nil, 500
        end
    end
    local control = headers["cache-control"] or ""
    local max_age = tonumber(control:match("max%-age=(%d+)")) or 0
    local stale = tonumber(control:match("stale%-while%-revalidate=(%d+)")) or 0
    return FORMAT .. "\n" .. (now() + max_age) .. "\n" .. concat(values, "\n"), 204, max_age, stale
end

local function refuse(status)
    if status == 401 or status == 403 then
        return exit(status)  -- the location's error_page asks the portal for the page
    end
    return exit(500)  -- ask() said why, in the error log
end

function M.authorize()
    if var.http_upgrade then
        local stored, status = ask()
        if not stored then
            return refuse(status)
        end
        count(parse(stored))
        return ngx.exec("@gpuaas_websocket")
    end

    local uri = var.request_uri
    local route, app_cookie = cookies()
    -- The key: route cookie, host and, on the portal's host, the route's path.
    local key = route .. "|" .. var.host .. "|" .. route_path(uri)
    local grant = fresh[key]
    if grant and grant.fresh_until > now() then
        return apply(grant, uri, app_cookie)
    end
    local kept = grants:get(key)
    grant = kept and parse(kept)
    if grant and grant.fresh_until > now() then
        remember(key, grant)
        return apply(grant, uri, app_cookie)
    end
    -- Stale (the dictionary drops it when its stale time ends): one request asks again
    -- (the lock lasts as long as a stale grant may), the others use it meanwhile.
    if grant and not grants:add("asking|" .. key, true, 1) then
        return apply(grant, uri, app_cookie)
    end

    local stored, status, max_age, stale = ask()
    if grant then
        grants:delete("asking|" .. key)
    end
    if stored then
        local asked = parse(stored)
        if max_age > 0 then
            grants:set(key, stored, max_age + stale)
            remember(key, asked)
        end
        return apply(asked, uri, app_cookie)
    end
    if status == 401 or status == 403 then
        grants:delete(key)
    elseif grant then
        return apply(grant, uri, app_cookie)  -- the portal did not answer: the stale grant, while it lasts
    end
    return refuse(status)
end

-- log_by_lua, where a request counted by authorize() ends (the app's location, the
-- page an error_page redirected it to, or the portal's WebSocket location): gives its
-- connection back, once, however it ended (the app's response, its failure, the
-- browser leaving, a WebSocket closing). From the request's grant where it still
-- has one: a variable read costs more in this phase than the rest of the work.
function M.release()
    local grant = ngx.ctx.gpuaas
    if grant then
        give_back(grant.instance_key)
        give_back(grant.user_key)
        return
    end
    local counted = var.g_counted
    if not counted or counted == "" then
        return
    end
    local at = find(counted, "\n", 1, true)
    give_back(sub(counted, 1, at - 1))
    give_back(sub(counted, at + 1))
end

-- header_filter_by_lua of a request whose range widen() asked for (app.conf): the
-- asked part of the app's one, which mask() cuts out of the masked bytes. Past the
-- body's end, a 416; a part that is not the one asked for, an empty 502.
function M.cut()
    local ctx = ngx.ctx
    local asked = ctx.gpuaas_asked
    if ngx.status ~= 206 or not asked then
        return  -- the whole body: the app ignored the Range, or If-Range did not match
    end
    local header = ngx.header
    ctx.gpuaas_left = tonumber(header["Content-Length"]) or false
    local sent_first, sent_last, total = match(header["Content-Range"] or "", "^%s*[Bb][Yy][Tt][Ee][Ss]%s+(%d+)%-(%d+)/(%S+)%s*$")
    sent_first, sent_last = tonumber(sent_first), tonumber(sent_last)
    local first, last
    if sent_last and (total == "*" or match(total, "^%d+$")) then
        if asked.suffix then
            first, last = max(sent_first, sent_last - asked.suffix + 1), sent_last
        else
            first, last = asked.first, asked.last and min(asked.last, sent_last) or sent_last
        end
    end
    ctx.gpuaas_skip, ctx.gpuaas_keep = 0, 0  -- nothing of the app's body, unless:
    if first and first > sent_last and total ~= "*" and first >= tonumber(total) then
        ngx.status = 416
        header["Content-Range"] = "bytes */" .. total
        header["Content-Length"] = 0
    elseif not first or first < sent_first or first > last then
        ngx.log(ngx.ERR, "the app answered a widened Range with Content-Range ", header["Content-Range"],
                ": nothing is sent")
        ngx.status = 502
        header["Content-Range"] = nil
        header["Content-Length"] = 0
    else
        header["Content-Range"] = format("bytes %d-%d/%s", first, last, total)
        header["Content-Length"] = last - first + 1
        ctx.gpuaas_skip, ctx.gpuaas_keep = first - sent_first, last - first + 1
    end
end

-- How many bytes at the end of data could begin secret.
local function could_begin(data, secret)
    local first = sub(secret, 1, 1)
    local at = find(data, first, max(#data - #secret + 2, 1), true)
    while at do
        if sub(data, at) == sub(secret, 1, #data - at + 1) then
            return #data - at + 1
        end
        at = find(data, first, at + 1, true)
    end
    return 0
end

-- body_filter_by_lua: masks the route's secret (the bridged token, which JupyterLab
-- writes into its page config) in every response, as the portal's proxy does in text
-- ones (apps.proxy.dataplane.redact, decision 0023): as many "x", so the body keeps
-- its length and the app's Content-Length holds, and a response leaves in one write.
-- Every type: reading the response's type here costs more than looking. A secret can
-- straddle two of the app's writes: a chunk's end that could begin one waits for the
-- next chunk; nothing else is held back, so event streams flow.
--
-- The chunk that completes a body of known length ends the response here, so nginx
-- does not run this filter again for the empty buffer that marks the end (a second
-- call costs about 2k instructions, reading the length here about 1k).
function M.mask()
    local ctx = ngx.ctx
    local grant = ctx.gpuaas  -- none on a page from the portal
    if not grant or not grant.secret then
        return
    end
    local chunk = ngx.arg[1]
    local left = ctx.gpuaas_left
    if left == nil then
        left = tonumber(var.g_length) or false  -- false: no length (chunked, a stream)
    end
    local last = ngx.arg[2]
    local ends = last
    if left then
        left = left - #chunk
        ctx.gpuaas_left = left
        ends = ends or left <= 0
    end
    local held = ctx.gpuaas_held
    local data = held and held .. chunk or chunk
    local changed = held ~= nil
    if memmem(data, #data, grant.secret, #grant.secret) ~= nil then
        data = gsub(data, grant.secret_pattern, grant.mask)
        changed = true
    end
    local keep = ends and 0 or could_begin(data, grant.secret)
    if keep > 0 then
        ctx.gpuaas_held = sub(data, -keep)
        data = sub(data, 1, -keep - 1)
        changed = true
    else
        ctx.gpuaas_held = nil
    end
    local skip = ctx.gpuaas_skip  -- a widened range (cut()): the asked part only
    if skip then
        local length, wanted = #data, ctx.gpuaas_keep
        data = sub(data, skip + 1, skip + wanted)
        ctx.gpuaas_skip, ctx.gpuaas_keep = max(skip - length, 0), wanted - #data
        changed = true
    end
    if changed then
        ngx.arg[1] = data
    end
    if ends and not last then
        ngx.arg[2] = true
    end
end

-- balancer_by_lua in the gpuaas_apps upstream: the route's address, so nginx reuses
-- kept-alive connections to it (the keepalive pool matches connections by address).
-- A name with several addresses gets them in turn, as nginx's resolver would.
function M.balance()
    local ctx = ngx.ctx
    local grant = ctx.gpuaas
    local addresses = grant.addresses
    local try = 1
    if addresses[2] then
        try = (ctx.gpuaas_try or 0) + 1
        ctx.gpuaas_try = try
        if try == 1 then
            balancer.set_more_tries(#addresses - 1)
        end
    end
    local address = addresses[(try - 1) % #addresses + 1]
    local ok, err = balancer.set_current_peer(address, grant.port)
    if not ok then
        ngx.log(ngx.ERR, "upstream ", address, ":", grant.port, ": ", err)
        return exit(ngx.ERROR)
    end
end

return M
