#!/usr/bin/env bash
# Debian's Chromium for the browser tests (Playwright cannot download its own here).
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
    echo "installing chromium"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version
