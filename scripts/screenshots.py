"""Screenshots of the portal's main pages at 1440 and 390 px wide, into docs/screenshots/
(``make screenshots``; the README shows them).

A portal of its own, as ``make run`` makes it (migrate, bootstrap_demo, serve, in a
temporary var/ on a free port), with an allocation and JupyterLab running on it (the
local agent runs it, as under ``make run``), made through the API as demo, driven in
Debian's Chromium (/usr/bin/chromium) by Playwright.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
WIDTHS = {"desktop": (1440, 900), "mobile": (390, 844)}
# Where the embedded default would otherwise point: another deployment's settings.
FOREIGN = ("REDIS_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuaas-screenshots-") as var:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAAS_") and k not in FOREIGN}
        env.update(GPUAAS_VAR_DIR=var, GPUAAS_SIMULATED_STEP_SECONDS="0.1")
        for command in (["migrate", "--noinput", "-v", "0"], ["bootstrap_demo"]):
            subprocess.run(
                [sys.executable, "manage.py", *command],
                cwd=ROOT,
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        port = _free_port()
        serve = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        instance = None
        try:
            instance, pages = _seed(base)
            _shoot(base, pages)
        finally:
            if instance is not None:
                _delete(base, instance)
            serve.send_signal(signal.SIGINT)
            serve.wait(timeout=30)
    print(f"screenshots written to {OUT.relative_to(ROOT)}/")


def _seed(base: str) -> tuple[str, dict[str, str]]:
    """An ACTIVE allocation of the one-GPU node the local agent serves, and JupyterLab
    running on it, as demo; the pages to show, by name, and the instance's API URL (to
    delete it after: the agent's workloads outlive it)."""
    with httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
        _wait(lambda: _answers(client, "/healthz"), "the portal")
        _sign_in(client, base)
        headers = _csrf(client, base)
        [project] = client.get("/api/v1/projects").json()["results"]
        allocations = f"/api/v1/projects/{project['id']}/allocations"
        allocated = client.post(
            allocations, json={"flavor": "h100-1x", "os_image": "ubuntu-22.04"}, headers=headers
        )
        if allocated.status_code != 202:
            raise SystemExit(f"no allocation: {allocated.text}")
        allocation = allocated.json()["allocation_id"]
        _wait(lambda: client.get(f"{allocations}/{allocation}").json()["state"] == "ACTIVE", "the allocation")
        # Enrolled and reporting: its agent can run apps now.
        _wait(lambda: client.get(f"{allocations}/{allocation}/access").json()["host"], "the local node agent")
        launched = client.post(
            f"/api/v1/projects/{project['id']}/app-instances",
            json={"app": "jupyterlab", "allocation_id": allocation, "name": "notebook"},
            headers=headers,
        )
        if launched.status_code != 202:
            raise SystemExit(f"JupyterLab could not be launched: {launched.text}")
        instance = launched.json()["instance_id"]
        api_instance = f"/api/v1/projects/{project['id']}/app-instances/{instance}"
        _wait(lambda: client.get(api_instance).json()["state"] == "running", "JupyterLab", timeout=240)
    portal = f"/projects/{project['id']}"
    return api_instance, {
        "dashboard": "/",
        "allocations": f"{portal}/allocations/",
        "allocation": f"{portal}/allocations/{allocation}/",
        "apps": "/apps/",
        "launch": f"{portal}/apps/jupyterlab/launch/",
        "instance": f"{portal}/instances/{instance}/",
        "usage": f"/tenants/{project['tenant_id']}/usage/",
    }


def _shoot(base: str, pages: dict[str, str]) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            for kind, (width, height) in WIDTHS.items():
                context = browser.new_context(viewport={"width": width, "height": height})
                page = context.new_page()
                page.goto(f"{base}/accounts/login/")
                page.screenshot(path=OUT / f"sign-in-{kind}.png")
                page.fill("input[name=username]", "demo")
                page.fill("input[name=password]", "demo")
                page.click("button[type=submit]")
                page.wait_for_url(f"{base}/")
                for name, path in pages.items():
                    page.goto(f"{base}{path}")
                    page.wait_for_load_state("networkidle")
                    page.screenshot(path=OUT / f"{name}-{kind}.png")
                if kind == "mobile":  # the folded navigation, opened
                    page.goto(f"{base}/")
                    page.get_by_role("button", name="Menu").click()
                    page.screenshot(path=OUT / "menu-mobile.png")
                context.close()
        finally:
            browser.close()


def _delete(base: str, instance: str) -> None:
    with httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
        _sign_in(client, base)
        client.delete(instance, headers=_csrf(client, base))
        _wait(lambda: client.get(instance).json()["state"] == "deleted", "JupyterLab deleted")


def _sign_in(client: httpx.Client, base: str) -> None:
    client.get("/accounts/login/")
    signed_in = client.post(
        "/accounts/login/",
        data={"username": "demo", "password": "demo", "csrfmiddlewaretoken": client.cookies["csrftoken"]},
        headers={"Referer": f"{base}/accounts/login/"},
    )
    if signed_in.status_code != 302:
        raise SystemExit(f"demo could not sign in: {signed_in.status_code}")


def _csrf(client: httpx.Client, base: str) -> dict[str, str]:
    return {"X-CSRFToken": client.cookies["csrftoken"], "Referer": f"{base}/"}


def _wait(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise SystemExit(f"{what} not ready within {timeout:g} s")


def _answers(client: httpx.Client, path: str) -> bool:
    try:
        return client.get(path).status_code == 200
    except httpx.TransportError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    main()
