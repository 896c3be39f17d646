"""A project admin logs in to their node the way the Access tab tells them: in
Chromium they add their public key, watch it go pending -> applied without a reload,
copy the ssh command, log in with real OpenSSH checking the host against the page's
known_hosts lines, then remove the key and are refused."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from apps.access import services as host_access
from tests.e2e.allocations import alices_allocation
from tests.e2e.pages import sign_in
from tests.support.agent import running_agent
from tests.support.processes import wait_for
from tests.support.ssh import key_pair

KEY_STATE = "#allocation-access [data-key] [data-field=state]"


@pytest.fixture
def world(db):
    allocation, _ = alices_allocation(enrolled=False)
    return allocation


def _login(command: str, known_hosts, key) -> subprocess.CompletedProcess:
    """Run the page's ssh command as a user would, with their key and the page's known_hosts."""
    options = ["-F", "/dev/null", "-i", str(key.private_path), "-o", "IdentitiesOnly=yes"]
    options += ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    options += ["-o", f"UserKnownHostsFile={known_hosts}"]
    words = shlex.split(command)
    return subprocess.run(
        [words[0], *options, *words[1:], "echo logged-in"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_add_a_key_log_in_with_the_pages_command_and_remove_it(world, portal, browser, tmp_path):
    allocation = world
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=portal.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    with running_agent(portal.url, allocation.node, tmp_path, ssh="own"):
        wait_for(
            lambda: host_access.ssh_host(
                type(allocation).objects.select_related("node").get(pk=allocation.pk)
            ),
            timeout=30,
            what="the node's sshd reported",
        )
        sign_in(page, portal.url, "alice")
        page.goto(f"{portal.url}/projects/{allocation.project_id}/allocations/{allocation.pk}/")
        page.click("nav.tabs >> text=Access")
        page.wait_for_url(
            f"{portal.url}/projects/{allocation.project_id}/allocations/{allocation.pk}/access/"
        )

        key = key_pair(tmp_path, "alice")
        page.fill("textarea[name=public_key]", key.public_key)
        page.click("#allocation-access >> text=Add key")
        page.wait_for_selector(f"{KEY_STATE} >> text=pending")
        assert "alice" in page.locator("#allocation-access [data-key]").inner_text()
        page.wait_for_selector(f"{KEY_STATE} >> text=applied", timeout=10_000)  # the tab follows the node

        page.click("button[data-copy=ssh-command]")
        command = page.evaluate("() => navigator.clipboard.readText()")
        assert command == page.locator("#ssh-command").inner_text()
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(page.locator("#known-hosts").inner_text())
        login = _login(command, known_hosts, key)
        assert login.returncode == 0, login.stderr
        assert login.stdout == "logged-in\n"

        page.click("#allocation-access [data-key] >> text=Remove")
        page.wait_for_selector("#allocation-access >> text=No keys yet", timeout=10_000)
        assert _login(command, known_hosts, key).returncode == 255
    assert errors == []
    context.close()
