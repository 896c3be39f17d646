"""NVIDIA's XID catalogue, for the codes an operator meets most
(https://docs.nvidia.com/deploy/xid-errors/): what each means and how bad it is.
Codes not listed are warnings until an operator learns otherwise."""

from __future__ import annotations

from typing import NamedTuple


class Xid(NamedTuple):
    severity: str
    description: str


CATALOGUE: dict[int, Xid] = {
    13: Xid("warning", "Graphics engine exception (usually the application)"),
    31: Xid("warning", "GPU memory page fault (usually the application)"),
    43: Xid("warning", "GPU stopped processing (the application's channel was reset)"),
    45: Xid("info", "Preemptive cleanup after earlier errors"),
    48: Xid("critical", "Double-bit ECC error: reset the GPU"),
    61: Xid("warning", "Internal micro-controller breakpoint or warning"),
    62: Xid("critical", "Internal micro-controller halt: reset the GPU"),
    63: Xid("warning", "ECC page retirement or row remapping recorded"),
    64: Xid("critical", "ECC page retirement or row remapping failed"),
    74: Xid("critical", "NVLink error"),
    79: Xid("critical", "GPU has fallen off the bus"),
    92: Xid("warning", "High single-bit ECC error rate"),
    94: Xid("warning", "Contained ECC error: the application must restart"),
    95: Xid("critical", "Uncontained ECC error: reset the GPU"),
    119: Xid("critical", "GSP RPC timeout"),
    120: Xid("critical", "GSP error"),
}


def classify(code: int) -> Xid:
    return CATALOGUE.get(code, Xid("warning", f"XID {code} (not in the platform's catalogue)"))
