#!/usr/bin/env bash
# Debian's nginx with its Lua module, for the data-plane tests (tests/proxy/test_nginx.py)
# and the proxy benchmark: the packages docker/Dockerfile.nginx installs, so tests run
# what production runs. The data plane is nginx/gpuaas.lua (decision 0036): it keeps
# the portal's grants (lua-resty-lrucache per worker), counts connections, picks the
# upstream (ngx.balancer, lua-resty-core) and masks the bridged token.
set -euo pipefail
packages=(nginx libnginx-mod-http-ndk libnginx-mod-http-lua lua-resty-core lua-resty-lrucache)
missing=()
for package in "${packages[@]}"; do
    if [ "$(dpkg-query -W -f '${db:Status-Status}' "$package" 2>/dev/null)" != installed ]; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    apt-get update -qq
    # --no-install-recommends: no init scripts' default site to start or to clash with.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The modules load, and the Lua the configuration needs is found (nginx -t runs init_by_lua).
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
cat >"$check/nginx.conf" <<CONF
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
pid $check/nginx.pid;
error_log stderr;
events {}
http { init_by_lua_block { require "ngx.balancer"; require "resty.lrucache" } }
CONF
/usr/sbin/nginx -q -t -p "$check" -c "$check/nginx.conf"
/usr/sbin/nginx -v
