-- The nginx data plane (docker/nginx.conf, decisions 0018, 0036): Debian's nginx with
-- its Lua module does everything an app route needs, in the phases app.conf names.
--
-- authorize() (rewrite phase): the portal's grant for the request. A grant is the
-- portal's 204 to /_gpuaas/auth (apps.proxy.authrequest): its x-gpuaas-* headers
-- become the $g_* variables the configuration proxies with. Grants are kept per
-- route cookie, host, route path and Origin for the answer's max-age, in the shared
-- dictionary and, parsed, in each worker (a bounded LRU cache); after max-age, for
-- its stale-while-revalidate, one request asks again while the others still use
-- the old grant. With no grant to use, a worker asks once for a key: a page's burst
-- of requests waits for that one answer. Refusals are never kept, and remove the
-- grant they answer. A
-- WebSocket handshake is always asked afresh (its Origin is checked) and never kept,
-- and is relayed by the portal's own proxy, which closes the socket when access ends
-- (decision 0021): nginx cannot close a connection it has upgraded.
--
-- A granted request is counted against its route's connection limits, per app
-- instance and per user, and release() (log phase) gives the count back when it
-- ends. balance() connects to the grant's address over kept-alive connections;
-- headers() and mask() keep the route's bridged token out of what the browser gets.

local balancer = require "ngx.balancer"
local lrucache = require "resty.lrucache"
local semaphore = require "ngx.semaphore"
local ffi = require "ffi"

-- glibc's memmem skips ahead by about the needle's length: string.find stops at every
-- occurrence of the needle's first character.
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
local byte = string.byte
local re_gsub = ngx.re.gsub
local lower = string.lower
local rep = string.rep
local max = math.max
local min = math.min
local type = type
local pairs = pairs
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
-- Lua (nginx.conf declares them).
local VARIABLES = { "g_upstream", "g_public", "g_from", "g_forwarded", "g_frame" }
local COUNT = #VARIABLES
-- Names the stored form (below): a grant stored by a configuration with other HEADERS
-- (the shared dictionary outlives `nginx -s reload`) is not read, but asked again.
local FORMAT = tostring(ngx.crc32_short(concat(HEADERS, " ")))

-- This worker's fresh grants, parsed, by key: a fresh grant is used without a trip to
-- shared memory. A copy never says more than the shared dictionary: a shared grant is
-- only replaced, or taken away by a refusal, once it is no longer fresh. Bounded
-- (configure()): the least recently used goes first; a request that still uses an
-- evicted grant holds it in ngx.ctx until it ends.
local fresh = lrucache.new(4096)
-- This worker's questions to the portal for keys with no grant to use meanwhile, by
-- key: { wake = a semaphore, waiting = how many wait on it, grant = the answer's }.
-- A page asks for its scripts, styles and fonts at once; after the first request
-- asks, the others wait for its answer instead of each asking the portal (64 asks
-- at once kept every one of them waiting some 50 ms on two cores).
local asking = {}
local ASK_SECONDS = 10  -- portal.conf's proxy_read_timeout: the longest an answer takes
-- The platform's hosts, which an app's redirect may not lead to (confine()): the
-- portal's (its issuer's) and those under the apps domain.
local portal_host, apps_domain = "", ""

-- nginx.conf's init_by_lua: how many grants a worker keeps, and the platform's hosts.
function M.configure(options)
    fresh = assert(lrucache.new(options.grants_per_worker))
    local issuer = options.issuer or ""
    portal_host = lower(match(issuer, "^%a[%w+.-]*://(%[[^%]]*%])") or match(issuer, "^%a[%w+.-]*://([^/:]+)") or "")
    apps_domain = lower(options.apps_domain or "")
    return M
end

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
-- a line (header values hold no newline). Nil for another format or a grant that
-- does not parse.
local function parse(stored)
    local grant = split(stored, "\n")
    if table.remove(grant, 1) ~= FORMAT or #grant ~= #HEADERS + 1 then
        return nil
    end
    grant.fresh_until = tonumber(table.remove(grant, 1))
    grant.upstream_prefix = grant[COUNT + 1]
    grant.authorization = grant[COUNT + 2]
    grant.passthrough = grant[COUNT + 3] == "1"
    grant.addresses = split(grant[COUNT + 4], " ")
    grant.port = tonumber(match(grant[1], ":(%d+)$"))
    grant.instance_key = "instance:" .. grant[COUNT + 5]
    grant.instance_limit = tonumber(grant[COUNT + 6])
    grant.user_key = "user:" .. grant[COUNT + 7]
    grant.user_limit = tonumber(grant[COUNT + 8])
    if not (grant.fresh_until and grant.port and grant.instance_limit and grant.user_limit) then
        return nil
    end
    grant.counted = grant.instance_key .. "\n" .. grant.user_key
    local secret = grant[COUNT + 9]
    if secret ~= "" then
        grant.secret = secret
        grant.secret_pattern = gsub(secret, "%W", "%%%0")  -- found as it is
        grant.mask = rep("x", #secret)
    end
    return grant
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
-- app; its own cookies do. $http_cookie joins a browser's Cookie headers with "; ".
local PLATFORM_COOKIES = [[(?:^|;)\s*(?:_gpuaas_route|sessionid|csrftoken)=[^;]*]]

local function app_cookies(cookies)
    if not cookies then
        return ""
    end
    cookies = re_gsub(cookies, PLATFORM_COOKIES, "", "jo")
    return (gsub(cookies, "^;%s*", ""))
end

-- The route cookie, as $cookie__gpuaas_route finds it (portal.conf asks the portal
-- about that value), and the Cookie header sent upstream. A browser that holds only
-- the route cookie (an app host's usual case) is answered without nginx's cookie
-- parser or a regular expression: its one cookie has no separator and nothing for
-- the app.
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
-- lose it. The dictionary keeps one small entry per instance and user seen (4 MB
-- holds tens of thousands); when full, it evicts the least recently used, which a
-- key at 0 is.
local function give_back(key)
    connections:incr(key, -1)
end

-- Counts the request on its instance and its user or, when either is at its limit,
-- counts nothing and ends the request with 429 (the location's error_page asks the
-- portal for the page). What was counted is kept in $g_counted as well as in the
-- grant in ngx.ctx: an error_page (a 502 or 504 page) or the handover of a WebSocket
-- redirects the request internally, which empties ngx.ctx before release() runs.
local function count(grant)
    local instance, user = grant.instance_key, grant.user_key
    local instances = connections:incr(instance, 1, 0)
    local users = connections:incr(user, 1, 0)
    if not instances or not users then
        if instances then give_back(instance) end
        if users then give_back(user) end
        ngx.log(ngx.ERR, "lua_shared_dict gpuaas_connections cannot count: nothing is proxied")
        return exit(503)
    end
    if instances > grant.instance_limit or users > grant.user_limit then
        give_back(instance)
        give_back(user)
        return exit(429)
    end
    var.g_counted = grant.counted
end

-- log_by_lua, where a request counted by authorize() ends (the app's location, the
-- page an error_page redirected it to, or the portal's WebSocket location): gives its
-- connection back, once, however it ended (the app's response, its failure, the
-- browser leaving, a WebSocket closing).
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

-- Sets one of the request's variables, or leaves it unset when the value is empty:
-- nginx reads an unset variable as empty, and each set costs some 300-400
-- instructions.
local function set(name, value)
    if value and value ~= "" then
        var[name] = value
    end
end

-- A byte offset as Range and Content-Range write it, or nil: at most 15 digits, which
-- a Lua number holds exactly (and no file is as long).
local function offset(digits)
    if not digits or #digits > 15 or not find(digits, "^%d+$") then
        return nil
    end
    return tonumber(digits)
end

-- The browser's Range on a route with a secret (apps.proxy.dataplane.ranges): when it
-- asks for one range, the app is asked for it widened by the secret's length less one
-- on each side, and headers() and mask() send the asked part of the masked bytes.
-- Returns the asked range, or nil: the app is asked for the whole body.
local function widen(grant, value)
    local first, last = match(value, "^%s*[Bb][Yy][Tt][Ee][Ss]%s*=%s*(%d*)%s*%-%s*(%d*)%s*$")
    if not first or #first > 15 or #last > 15 then
        return nil
    end
    local margin = #grant.secret - 1
    first, last = offset(first), offset(last)
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
    local ctx = ngx.ctx
    if asked then
        ctx.gpuaas_asked = asked
        var.g_ranged = "1"
        var.g_uri = upstream
    elseif upstream ~= uri then
        set("g_uri", upstream)
    end
    set("g_cookie", app_cookie)
    ctx.gpuaas_path = upstream  -- what a relative redirect of the app's is from (confine())
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
    ctx.gpuaas = grant
end

-- Asks the portal. Returns { stored = the grant's stored form, keep = how long to keep
-- it fresh, stale = and then stale }, or { status = of a refusal or of a portal that
-- did not answer, or did not answer with every header of a grant (web replicas older
-- than this nginx) }. A 308 (a route's own path without its slash) has the
-- browser's answer in `location` (refuse()).
local function ask()
    local answer = capture("/_gpuaas/auth")
    local headers = {}
    for name, value in pairs(answer.header) do
        headers[lower(name)] = value
    end
    if answer.status ~= 204 then
        if answer.status == 308 and headers.location then
            return { status = 308, location = headers.location }
        end
        if answer.status ~= 401 and answer.status ~= 403 then
            ngx.log(ngx.ERR, "the portal's /_gpuaas/auth answered ", answer.status, ": nothing is proxied")
        end
        return { status = answer.status }
    end
    local values = {}
    for i, name in ipairs(HEADERS) do
        values[i] = headers[name]
        if type(values[i]) ~= "string" then
            ngx.log(ngx.ERR, "the portal's grant has no ", name, ": nothing is proxied ",
                    "(web replicas older than this nginx: upgrade them first)")
            return { status = 500 }
        end
    end
    local control = headers["cache-control"] or ""
    local keep = tonumber(match(control, "max%-age=(%d+)")) or 0
    return {
        stored = FORMAT .. "\n" .. (now() + keep) .. "\n" .. concat(values, "\n"),
        keep = keep,
        stale = tonumber(match(control, "stale%-while%-revalidate=(%d+)")) or 0,
    }
end

-- The platform's error envelope (apps.core.errors) for a refusal of nginx's own that
-- no page from the portal can show: before any grant, or once the app has answered.
-- The correlation id is nginx's $request_id, which its log and the portal's have too.
local function envelope(code, message)
    ngx.header["X-Correlation-ID"] = var.request_id
    return '{"error": {"code": "' .. code .. '", "message": "' .. message .. '", "correlation_id": "'
        .. var.request_id .. '", "details": {}}}'
end

local function answer(status, code, message)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.header["Cache-Control"] = "no-store"
    if status == 503 then
        ngx.header["Retry-After"] = "5"
    end
    ngx.print(envelope(code, message))
    return exit(ngx.HTTP_OK)
end

-- The portal refused (its page says why, through the location's error_page), sent the
-- browser to the route's own path, or could not decide: nothing is proxied, as the
-- portal's own proxy answers when it cannot check access
-- (apps.proxy.dataplane.pages.UNCHECKED).
local function refuse(asked)
    local status = asked.status
    if status == 308 then
        return ngx.redirect(asked.location, 308)
    end
    if status == 401 or status == 403 then
        return exit(status)
    end
    return answer(503, "unavailable", "The platform cannot check your access to this app right now.")
end

local function unparsable()
    ngx.log(ngx.ERR, "the portal's grant does not parse: nothing is proxied")
    return refuse({ status = 500 })
end

-- A service worker's script: a route's page could install one for the whole origin
-- (the portal's, on a path_prefix route) and answer in its place after logout. Not a
-- page from the portal: the refusal does not depend on who asks.
local function refuse_service_worker()
    return answer(403, "forbidden", "Service worker scripts are not served on app routes.")
end

-- rewrite_by_lua of an app route (app.conf).
function M.authorize()
    if var.http_service_worker then
        return refuse_service_worker()
    end
    if var.http_upgrade then
        local asked = ask()
        if not asked.stored then
            return refuse(asked)
        end
        local grant = parse(asked.stored)
        if not grant then
            return unparsable()
        end
        count(grant)
        return ngx.exec("@gpuaas_websocket")
    end

    local uri = var.request_uri
    local route, app_cookie = cookies()
    -- The key: route cookie, Host (its port too: on a path_prefix route the portal
    -- takes the Origin it names as the route's own), on the portal's host the route's
    -- path, and the browser's Origin, which the portal checks: a grant for the route's
    -- own pages is not one for script on another route (apps.proxy.access.Target.foreign).
    local key = route .. "|" .. (var.http_host or "") .. "|" .. route_path(uri) .. "|" .. (var.http_origin or "")
    local grant = fresh:get(key)
    if grant and grant.fresh_until > now() then
        return apply(grant, uri, app_cookie)
    end
    local kept = grants:get(key)
    grant = kept and parse(kept)
    if grant and grant.fresh_until > now() then
        fresh:set(key, grant)
        return apply(grant, uri, app_cookie)
    end
    -- Stale (the dictionary drops it when its stale time ends): one request asks again
    -- (the lock lasts as long as a stale grant may), the others use it meanwhile.
    if grant and not grants:add("asking|" .. key, true, 1) then
        return apply(grant, uri, app_cookie)
    end
    -- None: wait for this worker's question in flight, if there is one. Only a grant
    -- is shared; a request whose wait brings none asks for itself.
    local mine
    if not grant then
        local pending = asking[key]
        if pending then
            pending.waiting = pending.waiting + 1
            local answered = pending.wake:wait(ASK_SECONDS)
            if pending.grant then
                return apply(pending.grant, uri, app_cookie)
            end
            if not answered and asking[key] == pending then
                asking[key] = nil  -- its asker never finished (a fault): the next one asks afresh
            end
        else
            mine = { wake = semaphore.new(), waiting = 0 }
            asking[key] = mine
        end
    end

    local asked = ask()
    local parsed = asked.stored and parse(asked.stored)
    if grant then
        grants:delete("asking|" .. key)
    elseif mine then
        if asking[key] == mine then
            asking[key] = nil
        end
        mine.grant = asked.keep and asked.keep > 0 and parsed or nil
        if mine.waiting > 0 then
            mine.wake:post(mine.waiting)
        end
    end
    if asked.stored then
        if not parsed then
            return unparsable()
        end
        if asked.keep > 0 then
            grants:set(key, asked.stored, asked.keep + asked.stale)
            fresh:set(key, parsed)
        end
        return apply(parsed, uri, app_cookie)
    end
    if asked.status == 401 or asked.status == 403 then
        grants:delete(key)
        fresh:delete(key)
    elseif grant and asked.status ~= 308 then
        return apply(grant, uri, app_cookie)  -- the portal did not answer: the stale grant, while it lasts
    end
    return refuse(asked)
end

-- Whether a Content-Encoding (one header, or a table of several: a browser applies
-- them all) names a coding other than identity.
local function encoded(value)
    if type(value) == "table" then
        for _, one in ipairs(value) do
            if encoded(one) then
                return true
            end
        end
        return false
    end
    for coding in string.gmatch(lower(value or ""), "[^,]+") do
        coding = match(coding, "^%s*(.-)%s*$")
        if coding ~= "" and coding ~= "identity" then
            return true
        end
    end
    return false
end

-- A 502 in place of the app's answer, whose body mask() replaces with the envelope.
local function refuse_answer(ctx, message)
    local body = envelope("bad_gateway", message)
    local header = ngx.header
    ngx.status = 502
    for _, name in ipairs({ "Content-Encoding", "Content-Range", "ETag", "Last-Modified", "Content-Disposition" }) do
        header[name] = nil
    end
    -- Of several Content-Encoding headers, nginx lets Lua clear only the last one: with
    -- one left, a client would try to decode the envelope, so the 502 goes empty.
    if encoded(ngx.resp.get_headers(0)["content-encoding"]) then
        body = ""
    end
    header["Content-Type"] = "application/json"
    header["Content-Length"] = #body
    header["Cache-Control"] = "no-store"
    ctx.gpuaas_refused = body
end

-- What headers() does with a widened range's answer: the asked part of the app's
-- one, which mask() cuts out of the masked bytes. Past the body's end a 416; a part
-- that is not the one asked for, an empty 502.
local function cut(ctx, asked)
    local header = ngx.header
    local sent = header["Content-Range"]
    local sent_first, sent_last, total = match(type(sent) == "string" and sent or "",
                                               "^%s*[Bb][Yy][Tt][Ee][Ss]%s+(%d+)%-(%d+)/(%S+)%s*$")
    sent_first, sent_last = offset(sent_first), offset(sent_last)
    local size = total and (total == "*" or offset(total))
    local first, last
    if sent_first and sent_last and size then
        if asked.suffix then
            first, last = max(sent_first, sent_last - asked.suffix + 1), sent_last
        else
            first, last = asked.first, asked.last and min(asked.last, sent_last) or sent_last
        end
    end
    ctx.gpuaas_skip, ctx.gpuaas_keep = 0, 0  -- nothing of the app's body, unless:
    if first and first > sent_last and size ~= true and first >= size then
        ngx.status = 416
        header["Content-Range"] = "bytes */" .. total
        header["Content-Length"] = 0
    elseif not first or first < sent_first or first > last then
        ngx.log(ngx.ERR, "the app answered a widened Range with Content-Range ", tostring(sent),
                ": nothing is sent")
        refuse_answer(ctx, "The app answered a part of a page other than the one asked for.")
    else
        header["Content-Range"] = format("bytes %d-%d/%s", first, last, total)
        header["Content-Length"] = last - first + 1
        ctx.gpuaas_skip, ctx.gpuaas_keep = first - sent_first, last - first + 1
    end
end

-- RFC 3986's remove_dot_segments, for a path that starts with "/".
local function without_dot_segments(path)
    local out = {}
    local segments = split(sub(path, 2), "/")
    for i, segment in ipairs(segments) do
        if segment == ".." then
            out[#out] = nil
        elseif segment ~= "." then
            out[#out + 1] = segment
        end
        if (segment == "." or segment == "..") and i == #segments then
            out[#out + 1] = ""  -- "/a/.." is the directory "/", not "/a"
        end
    end
    return "/" .. concat(out, "/")
end

-- ``resolved`` (a path, query and fragment) on the route, or the route's root: the
-- path with its dot segments (written "%2e" too) removed, moved under the public
-- prefix when the app wrote it as the upstream's.
local function on_route(grant, resolved, upstream)
    local path, rest = match(resolved, "^([^?#]*)(.*)$")
    path = without_dot_segments(gsub(path, "%%2[eE]", "."))
    local public = grant[2]
    if upstream and public ~= "/" and grant.upstream_prefix == "/" then
        path = public .. sub(path, 2)
    end
    if sub(path, 1, 2) == "//" or not (sub(path, 1, #public) == public or path == sub(public, 1, -2)) then
        return public
    end
    return path .. rest
end

-- A relative reference against the path the app was asked for (RFC 3986 5.2).
local function resolve(base, reference)
    base = match(base, "^[^?#]*")
    if sub(reference, 1, 1) == "/" then
        return reference
    end
    if reference == "" or find(reference, "^[?#]") then
        return base .. reference
    end
    return match(base, "^(.*/)") .. reference
end

local function platform_host(hostname, route_host)
    return hostname == portal_host or hostname == route_host
        or (apps_domain ~= "" and (hostname == apps_domain or sub(hostname, -#apps_domain - 1) == "." .. apps_domain))
end

-- Where an app's redirect may send the browser, as the portal's proxy decides it
-- (apps.proxy.dataplane.headers.rewrite_location, decision 0033): a place on the
-- route, however the app writes it (its own upstream address and paths it serves at
-- its root become the route's), or another site over https (an identity provider).
-- Anything else, and anything a browser could read otherwise than this parser
-- (`//host`, backslashes, control characters, "%2e%2e"), leads to the route's root.
local function confine(grant, value, request_path)
    local root = grant[2]
    if sub(value, 1, 2) == "//" or find(value, "[%z\1-\32\\\127]") then
        return root
    end
    local scheme, rest = match(value, "^(%a[%w+.-]*):(.*)$")
    if not scheme then
        return on_route(grant, resolve(request_path, value), true)
    end
    scheme = lower(scheme)
    local authority, tail = match(rest, "^//([^/?#]*)(.*)$")
    if not authority or find(authority, "@", 1, true) then
        return root
    end
    local hostname, port = match(authority, "^(%[[^%]]*%])(.*)$")
    if not hostname then
        hostname, port = match(authority, "^([^:]*)(.*)$")
    end
    hostname = gsub(lower(hostname), "%.+$", "")
    if port ~= "" then
        port = match(port, "^:(%d*)$")
        if not port then
            return root
        end
        port = tonumber(port)  -- nil for "host:", as a browser reads it
        if port and port > 65535 then
            return root
        end
    else
        port = nil
    end
    if hostname == "" then
        return root
    end
    if sub(tail, 1, 1) ~= "/" then
        tail = "/" .. tail
    end
    local upstream_host, upstream_port = match(grant[1], "^(.*):(%d+)$")
    if scheme == "http" and hostname == lower(upstream_host) and (port or 80) == tonumber(upstream_port) then
        return on_route(grant, tail, true)
    end
    local route_host = var.host
    if hostname == route_host and port == tonumber(match(var.http_host or "", ":(%d+)$")) then
        -- The route's own host, on whichever scheme the app believes it is served
        -- (behind TLS it may not know).
        return on_route(grant, tail, false)
    end
    if scheme == "https" and not platform_host(hostname, route_host) then
        return value
    end
    return root
end

-- Whether a header's value (a string, or a table of several) holds the secret.
local function carries(value, secret)
    if type(value) == "table" then
        for _, one in ipairs(value) do
            if find(one, secret, 1, true) then
                return true
            end
        end
        return false
    end
    return find(value, secret, 1, true) ~= nil
end

-- header_filter_by_lua of an app route: on a route with a secret, no response header
-- that carries it reaches the browser; a body the app encoded (though asked for
-- identity: nginx.conf's $gpuaas_accept_encoding) is not sent, since the secret in it
-- cannot be found; a widened range is cut to the part asked for (cut()).
function M.headers()
    local ctx = ngx.ctx
    local grant = ctx.gpuaas  -- none on a page from the portal
    if not grant then
        return
    end
    local header = ngx.header
    local location = header["Location"]
    if location then
        header["Location"] = confine(grant, type(location) == "table" and location[1] or location, ctx.gpuaas_path)
    end
    if not grant.secret then
        return
    end
    local secret = grant.secret
    local sent = ngx.resp.get_headers(0)  -- every one (their size is capped: proxy_buffer_size), by lowercase name
    for name, value in pairs(sent) do
        if carries(value, secret) then
            header[name] = nil
        end
    end
    if encoded(sent["content-encoding"]) and ngx.status ~= 304 and ngx.status ~= 204 then
        ngx.log(ngx.ERR, "the app sent an encoded body on a route with a secret to mask: nothing is sent")
        return refuse_answer(ctx, "The app sent a compressed page, or a part of one, that the platform "
                             .. "cannot check for secrets.")
    end
    ctx.gpuaas_left = tonumber(header["Content-Length"]) or false  -- the app's; false: no length
    local asked = ctx.gpuaas_asked
    if asked and ngx.status == 206 then
        cut(ctx, asked)
    end
end

-- How many bytes at the end of data could begin secret (fewer than its length).
local function could_begin(data, secret)
    local first = byte(secret, 1)
    for at = max(#data - #secret + 2, 1), #data do
        if byte(data, at) == first and sub(data, at) == sub(secret, 1, #data - at + 1) then
            return #data - at + 1
        end
    end
    return 0
end

-- body_filter_by_lua: masks the route's secret (the bridged token, which JupyterLab
-- writes into its page config) in every response, as the portal's proxy does in text
-- ones (apps.proxy.dataplane.redact, decision 0023): as many "x", so the body keeps
-- its length and the app's Content-Length holds. Every type: reading the response's
-- type here costs more than looking. A secret can straddle two of the app's writes: a
-- chunk's end that could begin one (fewer bytes than the secret) waits for the next
-- chunk; nothing else is held back, so event streams flow, and what a response holds
-- between chunks is bounded by the secret's length.
--
-- The chunk that completes a body of known length ends the response here, so nginx
-- does not run this filter again for the empty buffer that marks the end.
function M.mask()
    local ctx = ngx.ctx
    local grant = ctx.gpuaas
    if not grant or not grant.secret then
        return
    end
    local refused = ctx.gpuaas_refused
    if refused then  -- "" once it is sent, or when it must go empty (refuse_answer())
        ngx.arg[1] = refused  -- once: the response ends with it
        ngx.arg[2] = true
        ctx.gpuaas_refused = ""
        return
    end
    local secret = grant.secret
    local chunk = ngx.arg[1]
    local last = ngx.arg[2]
    local ends = last
    local left = ctx.gpuaas_left
    if left then
        left = left - #chunk
        ctx.gpuaas_left = left
        ends = ends or left <= 0
    end
    local held = ctx.gpuaas_held
    local data = held and held .. chunk or chunk
    local changed = held ~= nil
    if memmem(data, #data, secret, #secret) ~= nil then
        data = gsub(data, grant.secret_pattern, grant.mask)
        changed = true
    end
    local keep = ends and 0 or could_begin(data, secret)
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
