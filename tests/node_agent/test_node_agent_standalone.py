"""The node agent is a program of its own on GPU nodes, which have no Django, no
settings and none of the platform's code: every one of its modules imports, and
its command line answers, in a fresh interpreter that has none of them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

IMPORT_EVERY_MODULE = """
import pkgutil, sys
import node_agent
names = [m.name for m in pkgutil.walk_packages(node_agent.__path__, "node_agent.")]
for name in names:
    __import__(name)
platform = sorted(
    m for m in sys.modules
    if m.split(".")[0] in ("django", "apps", "gpuaas", "celery_worker", "rest_framework", "celery")
)
print(len(names), platform)
"""


def _without_django_settings() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _run_without_django(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=ROOT,
        env=_without_django_settings(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_agent_module_imports_without_django():
    done = _run_without_django("-c", IMPORT_EVERY_MODULE)
    assert done.returncode == 0, done.stderr
    count, platform = done.stdout.split(" ", 1)
    assert int(count) >= 10  # the runner, its client and the executors, not an empty package
    assert platform.strip() == "[]"


def test_the_agent_command_line_runs_without_django():
    done = _run_without_django("-m", "node_agent", "--help")
    assert done.returncode == 0, done.stderr
    assert "GPUaaS node agent" in done.stdout
    assert "--bootstrap-token" in done.stdout
