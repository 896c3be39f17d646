#!/usr/bin/env bash
# OpenSSH: the local agent runs an sshd of its own for the embedded default's node
# (node_agent/access.py), and the tests log in with the ssh client. `make run` and
# `make test` need both; the agent runs no sshd without them (no SSH access to the node).
set -euo pipefail
if [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "openssh-server is missing: install it (sudo apt-get install openssh-server) and run again" >&2
        exit 1
    fi
    echo "installing openssh-server and openssh-client"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        openssh-server openssh-client >/dev/null
fi
/usr/sbin/sshd -V 2>&1 | head -1 || true
