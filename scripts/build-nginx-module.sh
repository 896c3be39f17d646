#!/usr/bin/env bash
# Builds the data plane's nginx module (docker/nginx/module, decision 0027) against
# Debian's nginx with the flags Debian builds its own modules with (nginx-dev's
# conf_flags, as dh_nginx does), and installs it beside Debian's modules.
# Usage: build-nginx-module.sh [DESTDIR]   (default /usr/lib/nginx/modules)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source_dir=$here/docker/nginx/module
dest=${1:-/usr/lib/nginx/modules}
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cp -r /usr/share/nginx/src "$build/nginx"
cd "$build/nginx"
# shellcheck disable=SC1091
. ./conf_flags
./configure --with-cc-opt="-g -O2 -fPIC -Wall -Werror -D_FORTIFY_SOURCE=2 -fstack-protector-strong" \
    --with-ld-opt="-Wl,-z,relro -Wl,-z,now -fPIC" \
    "${NGX_CONF_FLAGS[@]}" --add-dynamic-module="$source_dir" >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log" >&2; exit 1; }
make -s -f objs/Makefile modules >"$build/make.log" 2>&1 || { cat "$build/make.log" >&2; exit 1; }
install -D -m 0644 objs/ngx_http_gpuaas_module.so "$dest/ngx_http_gpuaas_module.so"
