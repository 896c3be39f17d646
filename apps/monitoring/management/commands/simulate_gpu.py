"""``simulate_gpu NODE [--gpu N] [--temperature C] [--utilization PCT] [--memory PCT]
[--xid CODE] [--cpu PCT] [--node-memory PCT] [--clear]``: hold readings on a node's
simulated GPUs (all of them without ``--gpu``) and on the node's own CPU and memory
until ``--clear``, for drills and tests. The node's agent reads
them from the simulated world with its next report."""

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import NotFound
from apps.monitoring import services


def _percent(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 100:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = "Hold simulated GPU readings on a node until --clear."

    def add_arguments(self, parser):
        parser.add_argument("node", help="the node's hostname or id")
        parser.add_argument("--gpu", type=int, help="one GPU's index (default: all of them)")
        parser.add_argument("--temperature", type=float, help="degrees C")
        parser.add_argument("--utilization", type=_percent, help="percent")
        parser.add_argument("--memory", type=_percent, help="memory used, percent")
        parser.add_argument("--xid", type=int, help="an XID error code the GPU reports")
        parser.add_argument("--cpu", type=_percent, help="the node's CPU utilization, percent")
        parser.add_argument("--node-memory", type=_percent, help="the node's memory utilization, percent")
        parser.add_argument("--clear", action="store_true", help="let the GPUs read freely again")

    def handle(self, *args, node, gpu, clear, **options):
        try:
            found = services.find_node(node)
        except NotFound as exc:
            raise CommandError(exc.message) from None
        if gpu is not None and gpu < 0:
            raise CommandError("--gpu: an index from 0.")
        readings = {name: options[name] for name in (*services.HELD_READINGS, *services.NODE_READINGS)}
        if not clear and all(value is None for value in readings.values()):
            raise CommandError(
                "Give a reading to hold (--temperature, --utilization, --memory, --xid, --cpu, "
                "--node-memory) or --clear."
            )
        held = services.simulate_gpu(found, gpu, clear=clear, **readings)
        self.stdout.write(
            f"{found.hostname}: "
            + (
                ", ".join(f"{'node' if k == services.NODE else f'GPU {k}'}: {v}" for k, v in held.items())
                or "no held readings"
            )
        )
