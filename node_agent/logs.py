"""Ships each workload's output (its stdout and stderr, which the executor writes to
one file per instance) to the platform: every second, a batch of the lines written
since, for the instance's Logs tab.

Everything a workload can fill is bounded, since the app decides how much it prints:
a line longer than ``LINE_BYTES`` goes as several lines; a batch holds at most
``BATCH_LINES`` lines and ``BATCH_BYTES`` bytes, one a second for each instance (a
node's requests share one rate limit); when the app writes faster than that, the
agent keeps the newest ``BACKLOG_BYTES`` and skips the rest, counting the lines it
skipped (the platform shows "N lines dropped"); and once the file's content has been
shipped and it passed ``SHIPPED_BYTES``, the agent empties it.
Where the shipping stands (the byte offset) is kept beside the file, so a restarted
agent goes on where it stopped.

The agent knows the secret values of the workloads it starts (the app's token,
secret parameters) and hides them in the lines it ships: JupyterLab, for one, prints
its URL with the token. A restarted agent no longer knows them (secrets never go to
disk), so for workloads it adopted the app's own discretion is what remains.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from node_agent.client import AgentClient, ApiError

logger = logging.getLogger(__name__)

INTERVAL_SECONDS = 1.0
LINE_BYTES = 2000  # the platform takes lines of up to 2,000 characters
BATCH_LINES = 500  # and up to 500 lines a report
# Escaped in JSON a byte may take six (\u001b): a batch stays far below the platform's body limit.
BATCH_BYTES = 256 * 1024
BACKLOG_BYTES = 4 * 1024 * 1024
SHIPPED_BYTES = 1024 * 1024
MASK = "********"
# Shorter secret values would blank ordinary words (the app token is far longer); and
# no shorter one, so that hiding never makes a line longer than the platform takes.
MASK_MIN_CHARS = len(MASK)
OFFSET_FILE = "output.offset"


class LogShipper:
    def __init__(
        self,
        client: AgentClient,
        outputs: Callable[[], dict[str, Path]],
        *,
        interval: float = INTERVAL_SECONDS,
    ):
        """``outputs``: the output file of each instance the executor keeps, by instance id."""
        self.client, self.outputs, self.interval = client, outputs, interval
        self._masks: dict[str, list[str]] = {}
        self._lock = threading.Lock()  # masks arrive from the tasks thread

    def mask(self, instance_id: str, values: Iterable[str]) -> None:
        """Hide these values in the instance's lines from now on."""
        kept = sorted({v for v in values if isinstance(v, str) and len(v) >= MASK_MIN_CHARS}, key=len)
        with self._lock:
            self._masks[instance_id] = kept[::-1]  # longest first: a secret inside another goes with it

    def loop(self, stopping: threading.Event, guarded: Callable) -> None:
        while not stopping.wait(self.interval):
            guarded(self.ship)

    def ship(self) -> None:
        """One round: a batch of each instance's new lines."""
        outputs = self.outputs()
        with self._lock:
            for gone in set(self._masks) - set(outputs):
                del self._masks[gone]
        for instance_id, path in outputs.items():
            self._ship_one(instance_id, path)

    def _ship_one(self, instance_id: str, path: Path) -> None:
        offset = _read_offset(path)
        try:
            size = path.stat().st_size
        except OSError:
            return
        if size < offset:  # emptied or made anew since (a new start after a remove)
            offset = 0
        dropped = 0
        if size - offset > BACKLOG_BYTES:
            dropped, offset = _skip(path, offset, size - BACKLOG_BYTES)
        # One batch a round: an app printing more than that a second loses its oldest
        # lines to the backlog's bound, rather than the node's other apps their turn.
        lines, offset_after = _read_lines(path, offset, size)
        if lines or dropped:
            if not self._send(instance_id, [self._masked(instance_id, line) for line in lines], dropped):
                return  # the same lines again next round
            offset = offset_after
            _write_offset(path, offset)
        if offset >= SHIPPED_BYTES:
            _empty_if_shipped(path, offset)

    def _send(self, instance_id: str, lines: list[str], dropped: int) -> bool:
        """Whether the lines are done with: taken, or refused for good."""
        try:
            self.client.logs(instance_id, lines, dropped=dropped)
        except ApiError as exc:
            if exc.status == 401:
                raise
            if exc.status == 429:  # the node's request budget: later
                return False
            # Not the platform's to take (no longer this node's instance, say): the
            # lines are skipped, not retried forever.
            logger.warning(
                "instance %s: the platform refused %d lines of output (%s)", instance_id, len(lines), exc.code
            )
        return True

    def _masked(self, instance_id: str, line: str) -> str:
        with self._lock:
            masks = self._masks.get(instance_id, ())
        for value in masks:
            line = line.replace(value, MASK)
        return line


def _read_lines(path: Path, offset: int, size: int) -> tuple[list[str], int]:
    """Whole lines from ``offset`` (at most a batch), and the offset after them. An
    unfinished last line waits for its end, unless it is already as long as a line may be."""
    with open(path, "rb") as output:
        output.seek(offset)
        data = output.read(min(size - offset, BATCH_BYTES))
    lines: list[bytes] = []
    position = 0
    while len(lines) < BATCH_LINES:
        end = data.find(b"\n", position, position + LINE_BYTES + 1)
        if end < 0:
            if len(data) - position < LINE_BYTES:
                break  # unfinished (or nothing left)
            end = position + LINE_BYTES  # too long: its first part goes as a line of its own
            lines.append(data[position:end])
            position = end
            continue
        lines.append(data[position:end].rstrip(b"\r"))
        position = end + 1
    return [_text(line) for line in lines], offset + position


def _text(line: bytes) -> str:
    # The platform refuses NUL (PostgreSQL text cannot hold it); undecodable bytes show as U+FFFD.
    return line.decode("utf-8", "replace").replace("\x00", "\ufffd")


def _skip(path: Path, offset: int, to: int) -> tuple[int, int]:
    """Skip to the first line that starts at or after ``to``; returns how many lines
    were skipped and the offset of that line."""
    skipped = 0
    with open(path, "rb") as output:
        output.seek(offset)
        position = offset
        while position < to:
            chunk = output.read(min(1024 * 1024, to - position))
            if not chunk:
                break
            skipped += chunk.count(b"\n")
            position += len(chunk)
        # The line that ``to`` cuts goes too, or a fragment of it would look like a line.
        rest = output.read(LINE_BYTES)
        newline = rest.find(b"\n")
        if newline >= 0:
            skipped += 1
            position += newline + 1
    return skipped, position


def _empty_if_shipped(path: Path, offset: int) -> None:
    """Empty the file once all of it went out. The workload appends (``O_APPEND``), so
    after this its next write lands at the start. A line written between the size check
    and the truncation is lost: a window of microseconds, once a megabyte."""
    try:
        if path.stat().st_size != offset:
            return
        os.truncate(path, 0)
    except OSError:
        return
    _write_offset(path, 0)


def _read_offset(path: Path) -> int:
    try:
        return max(0, int(path.with_name(OFFSET_FILE).read_text()))
    except (OSError, ValueError):
        return 0


def _write_offset(path: Path, offset: int) -> None:
    target = path.with_name(OFFSET_FILE)
    temporary = target.with_suffix(".tmp")
    try:
        temporary.write_text(str(offset))
        temporary.replace(target)
    except OSError:  # the instance was removed meanwhile
        pass
