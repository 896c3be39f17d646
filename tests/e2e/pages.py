"""What browser tests do alike on the portal's pages: sign in, keep a screenshot.

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep the screenshots the tests take."""

from __future__ import annotations

import os
from pathlib import Path

SCREENSHOTS = os.environ.get("GPUAAS_E2E_SCREENSHOTS")


def sign_in(page, base_url: str, username: str) -> None:
    """Through the local sign-in form (every test user's password is ``pw``)."""
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


def shot(page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)
