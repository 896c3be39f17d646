"""The node credential: obtained once by spending the bootstrap token, then
kept in the state directory (readable by the agent's user only) so restarts
need no new token."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from node_agent.client import AgentClient

logger = logging.getLogger(__name__)

FILENAME = "credential"


class NotEnrolled(Exception):
    """No saved credential and no bootstrap token to get one."""


def load(state_dir: Path) -> str | None:
    try:
        return (Path(state_dir) / FILENAME).read_text().strip() or None
    except FileNotFoundError:
        return None


def save(state_dir: Path, credential: str) -> None:
    """Written to a temporary file first, so a crash never leaves half a credential."""
    path = Path(state_dir) / FILENAME
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(credential)
    temporary.replace(path)


def forget(state_dir: Path) -> None:
    (Path(state_dir) / FILENAME).unlink(missing_ok=True)


def obtain(client: AgentClient, state_dir: Path, hostname: str, bootstrap_token: str | None) -> str:
    """The saved credential; without one, enroll with the bootstrap token. The saved
    one wins because the token stays in the agent's environment file after it is spent."""
    credential = load(state_dir)
    if credential is not None:
        return credential
    if not bootstrap_token:
        raise NotEnrolled(f"no node credential in {state_dir}: give a bootstrap token to enroll")
    credential = client.enroll(hostname, bootstrap_token)
    save(state_dir, credential)
    logger.info("enrolled as %s", hostname)
    return credential
