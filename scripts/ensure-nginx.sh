#!/usr/bin/env bash
# Debian's nginx for the data-plane tests (tests/proxy/test_nginx.py). On bookworm the
# `nginx` package is the one build that has both auth_request (authorization per
# request) and sub_filter (blanking an app's bridged token from its pages).
set -euo pipefail
if [ ! -x /usr/sbin/nginx ]; then
    echo "installing nginx"
    apt-get update -qq
    # --no-install-recommends: no init scripts' default site to start or to clash with.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null
fi
modules=$(/usr/sbin/nginx -V 2>&1)
for module in http_auth_request_module http_sub_module; do
    if ! grep -q -- "--with-$module" <<<"$modules"; then
        echo "/usr/sbin/nginx lacks $module: install Debian's nginx package" >&2
        exit 1
    fi
done
/usr/sbin/nginx -v
