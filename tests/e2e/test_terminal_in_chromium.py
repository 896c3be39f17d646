"""The allocation's web terminal in Chromium: xterm.js on the portal's page, a real
node agent holding the shell. Typing runs commands, the shell follows the window's
size, a dropped socket resumes with every byte once, and signing out (in another
tab) ends it."""

from __future__ import annotations

import re

import pytest

from apps.access.models import TerminalSession
from tests.e2e.pages import sign_in
from tests.support.agent import running_agent
from tests.support.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def text(page) -> str:
    return page.evaluate("window.gpuaasTerminal.text()")


def wait_text(page, pattern: str, timeout: float = 30.0) -> str:
    return wait_for(lambda: re.search(pattern, text(page)) and text(page), timeout=timeout, what=pattern)


def run(page, command: str) -> None:
    page.keyboard.type(command)
    page.keyboard.press("Enter")


@pytest.fixture
def terminal_page(portal, page, active_allocation, allocator, tmp_path):
    with running_agent(portal.url, active_allocation.node, tmp_path):
        sign_in(page, portal.url, allocator.username)
        page.goto(f"{portal.url}/projects/{active_allocation.project_id}/allocations/{active_allocation.pk}/")
        page.click("a.tab:has-text('Terminal')")
        page.wait_for_selector("[data-terminal-status]:has-text('Connected')")
        page.click("[data-terminal-screen]")
        wait_text(page, r"(?m)[#$] $")
        yield page


def test_typing_a_command_shows_its_output_and_the_shell_follows_the_window(terminal_page):
    page = terminal_page
    run(page, "echo hi-$((40+2))")
    wait_text(page, r"(?m)^hi-42$")
    cols = page.evaluate("window.gpuaasTerminal.term.cols")
    run(page, "tput cols")
    wait_text(page, rf"(?m)^{cols}$")
    page.set_viewport_size({"width": 640, "height": 700})
    narrower = wait_for(
        lambda: (n := page.evaluate("window.gpuaasTerminal.term.cols")) < cols and n,
        what="a narrower terminal",
    )
    run(page, "clear; tput cols")
    wait_text(page, rf"(?m)^{narrower}$")
    assert page.js_errors == []


def paste(page, text: str) -> None:
    """As the browser delivers a paste: a paste event on xterm.js's input element."""
    page.evaluate(
        """(text) => {
          const data = new DataTransfer();
          data.setData("text/plain", text);
          document.querySelector("[data-terminal-screen] textarea").dispatchEvent(
            new ClipboardEvent("paste", {clipboardData: data, bubbles: true, cancelable: true}));
        }""",
        text,
    )


def test_pasting_reaches_the_shell_whole_even_when_large(terminal_page):
    page = terminal_page
    paste(page, "echo pasted-$((6*7))")
    page.keyboard.press("Enter")
    wait_text(page, r"(?m)^pasted-42$")
    # 40 KB, more than one input frame: every byte reaches the program reading it (the
    # terminal out of line mode first, whose lines stop at 4 KB).
    run(page, "stty -icanon; echo rea''dy; head -c 40000 | wc -c; stty icanon")
    wait_text(page, r"(?m)^ready$")
    paste(page, "x" * 40000)
    wait_text(page, r"x40000\n")  # its echo, then the count on the same line


def test_a_dropped_socket_resumes_with_nothing_lost_or_repeated(terminal_page):
    page = terminal_page
    # Output pauses half-way: the socket drops while the shell still has output to come.
    run(
        page, "clear; for i in $(seq 1 3000); do echo n-$i; [ $i = 1500 ] && sleep 1; done; echo fin-$((1+1))"
    )
    wait_text(page, r"(?m)^n-1500$")
    page.evaluate("window.gpuaasTerminal.drop()")
    screen = wait_text(page, r"(?m)^fin-2$", timeout=60)
    numbers = [int(n) for n in re.findall(r"(?m)^n-(\d+)$", screen)]
    assert numbers == list(range(1, 3001))
    page.wait_for_selector("[data-terminal-status]:has-text('Connected')")
    assert page.js_errors == []


def test_signing_out_in_another_tab_ends_the_terminal(terminal_page, portal):
    page = terminal_page
    other = page.context.new_page()
    other.goto(f"{portal.url}/")
    other.click("form.account button[type=submit]")
    page.wait_for_selector("[data-terminal-status][data-state=ended]", timeout=5000)
    assert "signed out" in page.text_content("[data-terminal-status]")
    session = TerminalSession.objects.get()
    assert session.end_reason == "signed out"


def test_a_project_admin_replays_the_recording_in_the_portal(terminal_page, portal, active_allocation):
    page = terminal_page
    run(page, "echo replayed-$((3*3)); exit")
    page.wait_for_selector("[data-terminal-status][data-state=ended]")
    page.click("a.tab:has-text('Terminal sessions')")
    page.click("a:has-text('Replay')")
    player = page.wait_for_selector(".ap-wrapper, .ap-player")
    assert player is not None
    # The player fetched and parsed the recording: its poster shows the first frame, and
    # playing it to the end shows the command's output.
    page.click(".ap-player")
    wait_for(lambda: "replayed-9" in page.inner_text(".ap-player"), timeout=30, what="the replayed output")
    assert page.js_errors == []
