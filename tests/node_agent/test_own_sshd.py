"""The embedded default's own sshd: an agent started after one was killed stops the
sshd it left behind and keeps its port, so the ssh command users were given stays right."""

from __future__ import annotations

from node_agent import access


def test_a_restarted_agent_stops_the_sshd_left_behind_and_keeps_its_port(tmp_path):
    left_behind = access.OwnSshd(tmp_path)
    left_behind.start()
    try:
        restarted = access.OwnSshd(tmp_path)
        restarted.start()
        try:
            assert restarted.port == left_behind.port
            assert left_behind.process.wait(timeout=10) is not None
        finally:
            restarted.stop()
    finally:
        left_behind.stop()
