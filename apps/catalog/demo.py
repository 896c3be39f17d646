"""Demo flavors: ``h100-8x`` (8 GPUs per node) and ``h100-1x`` (1 GPU)."""

from apps.catalog.models import Flavor

FLAVORS = [
    {"name": "h100-8x", "gpu_model": "NVIDIA H100 80GB SXM", "gpus_per_node": 8, "cpu_cores": 112,
     "memory_gb": 2048, "rate_per_node_hour": "98.3200", "description": "8x H100 SXM, NVLink, 8x 400G IB"},
    {"name": "h100-1x", "gpu_model": "NVIDIA H100 80GB PCIe", "gpus_per_node": 1, "cpu_cores": 16,
     "memory_gb": 256, "rate_per_node_hour": "12.2900", "description": "1x H100 PCIe"},
]


def bootstrap(stdout) -> None:
    for values in FLAVORS:
        Flavor.objects.update_or_create(name=values["name"], defaults=values)
    stdout.write(f"catalog: flavors {', '.join(f['name'] for f in FLAVORS)}")
