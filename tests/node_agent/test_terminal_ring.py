"""The agent's terminal ring: what a browser coming back with an offset is sent."""

from __future__ import annotations

import pytest

from node_agent.terminal import RING_BYTES, WINDOW_BYTES, Gone, RingBuffer


def stream(n: int) -> bytes:
    return bytes(i % 251 for i in range(n))


def test_the_ring_holds_at_least_64_kb_and_more_than_the_window():
    assert RING_BYTES >= 64 * 1024
    assert RING_BYTES > WINDOW_BYTES  # every unacknowledged byte is still in the ring


def test_replay_from_any_offset_still_held_returns_exactly_the_missed_bytes():
    data = stream(10_000)
    ring = RingBuffer(4096)
    for start in range(0, len(data), 700):
        ring.append(data[start : start + 700])
    assert ring.end == len(data)
    assert ring.end - ring.start >= 4096
    for offset in (ring.start, ring.start + 1, ring.end - 1, ring.end):
        replay = bytearray()
        while offset + len(replay) < ring.end:
            replay += ring.read(offset + len(replay), 333)
        assert bytes(replay) == data[offset:]


def test_nothing_is_replayed_at_the_end():
    ring = RingBuffer(16)
    ring.append(b"abc")
    assert ring.read(3, 100) == b""


def test_an_offset_that_left_the_ring_says_where_it_starts_now():
    ring = RingBuffer(8)
    ring.append(stream(40))
    with pytest.raises(Gone) as gone:
        ring.read(0, 10)
    assert gone.value.start == ring.start > 0
    assert ring.read(gone.value.start, 100) == stream(40)[gone.value.start :]


def test_an_offset_past_the_end_is_refused():
    ring = RingBuffer(8)
    ring.append(b"abc")
    with pytest.raises(ValueError, match="past the end"):
        ring.read(4, 1)


def test_trimming_keeps_between_one_and_two_capacities():
    ring = RingBuffer(1000)
    for _ in range(50):
        ring.append(stream(333))
        assert 0 <= ring.end - ring.start <= 2000
        assert ring.end - ring.start >= min(ring.end, 1000)
