-- Where the nginx data plane gets its grants (docker/nginx.conf, decisions 0018,
-- 0027). An app route's request comes here, to the named location @gpuaas_ask, when
-- its worker has no fresh grant for it: the module (nginx/module) authorizes the
-- others itself. A grant is the portal's 204 to /_gpuaas/auth
-- (apps.proxy.authrequest); its x-gpuaas-* headers, in a stored form, are kept per
-- route cookie, host and route path for the answer's max-age in a shared
-- dictionary, and the module keeps what it is given, parsed, while fresh. After
-- max-age, for the answer's stale-while-revalidate, one request asks again while
-- the others still use the old grant. Refusals are never kept, and remove the grant
-- they answer. A WebSocket handshake is always asked afresh (its Origin is checked)
-- and never kept, and is relayed by the portal's own proxy, which closes the socket
-- when access ends (decision 0021): nginx cannot close a connection it has upgraded.

local ffi = require "ffi"
local get_request = require("resty.core.base").get_request

ffi.cdef [[
int ngx_http_gpuaas_key(void *r, unsigned char **data, size_t *len);
int ngx_http_gpuaas_grant(void *r, const char *stored, size_t len, int remember);
]]
local C = ffi.C

local grants = ngx.shared.gpuaas_grants
local capture = ngx.location.capture
local now = ngx.now
local exit = ngx.exit
local var = ngx.var
local concat = table.concat
local lower = string.lower
local match = string.match
local format = string.format
local tonumber = tonumber

local M = {}

-- The grant's headers, in the order the stored form holds them (the module's
-- G_* values).
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
-- Names the stored form: "FORMAT\nfresh-until (epoch ms)\n" and the headers'
-- values in HEADERS' order, one a line (header values hold no newline). A grant
-- stored by a configuration with another form (the shared dictionary outlives
-- `nginx -s reload`) is not read, but asked again.
local FORMAT = tostring(ngx.crc32_short(concat(HEADERS, " ") .. " ms"))
local PREFIX = FORMAT .. "\n"

-- The request's key in the dictionary, as the module computes it.
local function key()
    local data, len = ffi.new("unsigned char *[1]"), ffi.new("size_t[1]")
    if C.ngx_http_gpuaas_key(get_request(), data, len) ~= 0 then
        return exit(500)
    end
    return ffi.string(data[0], len[0])
end

-- Hands the grant to the module, which applies it (and, if `remember`, keeps it
-- while fresh) or answers the status to end the request with: 429 at a connection
-- limit (the location's error_page asks the portal for the page).
local function apply(stored, remember)
    local status = C.ngx_http_gpuaas_grant(get_request(), stored, #stored, remember and 1 or 0)
    if status ~= 0 then
        return exit(status)
    end
end

local function fresh_until(stored)
    return tonumber(match(stored, "^[^\n]*\n(%d+)\n")) or 0
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
    local until_ms = format("%d", (now() + max_age) * 1000)
    return PREFIX .. until_ms .. "\n" .. concat(values, "\n"), 204, max_age, stale
end

local function refuse(status)
    if status == 401 or status == 403 then
        return exit(status)  -- the location's error_page asks the portal for the page
    end
    return exit(500)  -- ask() said why, in the error log
end

-- rewrite_by_lua in @gpuaas_ask.
function M.authorize()
    if var.http_upgrade then
        local stored, status = ask()
        if not stored then
            return refuse(status)
        end
        apply(stored, false)
        return ngx.exec("@gpuaas_websocket")
    end

    local request_key = key()
    local kept = grants:get(request_key)
    if kept and kept:sub(1, #PREFIX) ~= PREFIX then
        kept = nil
    end
    if kept and fresh_until(kept) > now() * 1000 then
        return apply(kept, true)
    end
    -- Stale (the dictionary drops it when its stale time ends): one request asks again
    -- (the lock lasts as long as a stale grant may), the others use it meanwhile.
    if kept and not grants:add("asking|" .. request_key, true, 1) then
        return apply(kept, false)
    end

    local stored, status, max_age, stale = ask()
    if kept then
        grants:delete("asking|" .. request_key)
    end
    if stored then
        if max_age > 0 then
            grants:set(request_key, stored, max_age + stale)
        end
        return apply(stored, max_age > 0)
    end
    if status == 401 or status == 403 then
        grants:delete(request_key)
    elseif kept then
        return apply(kept, false)  -- the portal did not answer: the stale grant, while it lasts
    end
    return refuse(status)
end

return M
