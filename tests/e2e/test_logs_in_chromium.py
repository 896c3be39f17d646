"""Logs streaming: a project admin opens a running app's instance in Chromium, goes
to its Logs tab and watches the lines the app prints appear live (a real node agent
runs the app and ships its output), then downloads the log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from apps.allocations.models import Node
from apps.runtime import services as runtime
from apps.runtime.models import AppInstance
from apps.tenancy import principal as principals
from tests.e2e.allocations import alices_allocation
from tests.e2e.pages import sign_in
from tests.support.agent import running_agent
from tests.support.chatty import publish_chatty
from tests.support.concurrency import in_own_thread
from tests.support.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LINES = "[data-logs-view] .log-line"


@pytest.fixture
def world(db):
    allocation, alice = alices_allocation(enrolled=False)
    publish_chatty()
    return allocation, alice


def _launch(alice, allocation) -> AppInstance:
    operation = runtime.launch(
        principals.for_user(alice),
        allocation.project,
        app_slug="chatty",
        allocation_id=allocation.pk,
        name="chat-1",
    )
    return operation.instance


def _state(instance_id) -> str:
    return AppInstance.objects.get(pk=instance_id).state


def _enrolled(node_id) -> bool:
    return bool(Node.objects.get(pk=node_id).agent_address)


def ticks(page) -> list[int]:
    texts = page.locator(LINES).all_inner_texts()
    return [int(match[1]) for text in texts if (match := re.fullmatch(r"tick (\d+)", text))]


def test_logs_streaming(world, portal, page, tmp_path):
    allocation, alice = world
    with running_agent(portal.url, allocation.node, tmp_path):
        wait_for(lambda: in_own_thread(_enrolled, allocation.node_id), what="the agent enrolled")
        instance = in_own_thread(_launch, alice, allocation)
        wait_for(lambda: in_own_thread(_state, instance.pk) == "running", timeout=60, what="running")

        sign_in(page, portal.url, "alice")

        # Open the instance from the project's list, then its Logs tab.
        page.goto(f"{portal.url}/projects/{allocation.project_id}/instances/")
        page.click("text=chat-1")
        page.wait_for_url(re.compile(rf"/instances/{instance.pk}/$"))
        page.click("a.tab:has-text('Logs')")
        page.wait_for_url(re.compile(r"\?tab=logs$"))
        page.wait_for_selector("[data-logs-status][data-state=live]")
        page.evaluate("() => { window.__noReload = true; }")
        assert page.locator(LINES).first.inner_text() == "starting; my token is ********"
        assert page.locator(f"{LINES}:text-is('a warning on stderr')").count() == 1

        # Lines appear as the app prints them, without a reload.
        shown = max(ticks(page), default=0)
        page.wait_for_selector(f"{LINES}:text-is('tick {shown + 3}')", timeout=20_000)
        assert page.evaluate("window.__noReload") is True
        seen = ticks(page)
        assert seen == list(range(1, len(seen) + 1))  # each line once, in order

        with page.expect_download() as download_info:
            page.click("[data-logs-download]")
        download = download_info.value
        assert download.suggested_filename == "chat-1-logs.txt"
        lines = Path(download.path()).read_text(encoding="utf-8").splitlines()
        assert lines[0] == "starting; my token is ********"
        assert "a warning on stderr" in lines
        assert f"tick {shown + 3}" in lines
        assert page.js_errors == []
