#!/usr/bin/env bash
# Debian's nginx with its Lua module and the data plane's own module, for the
# data-plane tests (tests/proxy/test_nginx.py) and the proxy benchmark: what
# docker/Dockerfile.nginx installs and builds, so tests run what production runs. The
# Lua asks the portal for grants (decision 0018); the module applies them, counts
# connections, picks the upstream and masks the bridged token (decision 0027). It is
# rebuilt when its source changes.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
packages=(nginx libnginx-mod-http-ndk libnginx-mod-http-lua lua-resty-core
          nginx-dev gcc make libpcre2-dev libssl-dev zlib1g-dev)
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
module=/usr/lib/nginx/modules/ngx_http_gpuaas_module.so
source_hash=$( (cat "$here"/docker/nginx/module/* "$here/scripts/build-nginx-module.sh"; /usr/sbin/nginx -v 2>&1) | sha256sum | cut -d' ' -f1)
if [ ! -f "$module" ] || [ "$(cat "$module.source" 2>/dev/null)" != "$source_hash" ]; then
    echo "building $module"
    bash "$here/scripts/build-nginx-module.sh"
    echo "$source_hash" >"$module.source"
fi
# The modules load, and the Lua the configuration needs is found (nginx -t runs init_by_lua).
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
cat >"$check/nginx.conf" <<EOF
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
load_module $module;
pid $check/nginx.pid;
error_log stderr;
events {}
http { init_by_lua_block { require "resty.core.base" } }
EOF
/usr/sbin/nginx -q -t -p "$check" -c "$check/nginx.conf"
/usr/sbin/nginx -v
