#!/usr/bin/env bash
# bubblewrap: the local agent runs workloads (JupyterLab kernels) in its sandbox, away
# from the portal's secrets (node_agent/executors/sandbox.py). `make run` and
# `make test` need it; the agent refuses to start workloads without it.
set -euo pipefail
if ! command -v bwrap >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bubblewrap is missing: install it (sudo apt-get install bubblewrap) and run again" >&2
        exit 1
    fi
    echo "installing bubblewrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
fi
bwrap --version
