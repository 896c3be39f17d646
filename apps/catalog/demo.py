"""Demo flavors (``h100-8x``, ``h100-1x``) and the shipped catalog, entitled to every tenant."""

import json
from pathlib import Path

from apps.catalog import services
from apps.catalog.models import App, Flavor

FLAVORS = [
    {
        "name": "h100-8x",
        "gpu_model": "NVIDIA H100 80GB SXM",
        "gpus_per_node": 8,
        "cpu_cores": 112,
        "memory_gb": 2048,
        "rate_per_node_hour": "98.3200",
        "description": "8x H100 SXM, NVLink, 8x 400G IB",
    },
    {
        "name": "h100-1x",
        "gpu_model": "NVIDIA H100 80GB PCIe",
        "gpus_per_node": 1,
        "cpu_cores": 16,
        "memory_gb": 256,
        "rate_per_node_hour": "12.2900",
        "description": "1x H100 PCIe",
    },
]
SHIPPED = Path(__file__).parent / "shipped"
APPS = [
    ("jupyterlab", "JupyterLab", "1.1.0", "jupyterlab.json"),
    ("vllm-openai", "vLLM OpenAI server", "1.0.0", "vllm-openai.json"),
    ("netdata", "Netdata node dashboard", "1.0.0", "netdata.json"),
]


def bootstrap(stdout) -> None:
    for values in FLAVORS:
        Flavor.objects.update_or_create(name=values["name"], defaults=values)
    for slug, name, version, filename in APPS:
        manifest = json.loads((SHIPPED / filename).read_text())
        app, _ = App.objects.update_or_create(
            slug=slug, defaults={"name": name, "summary": manifest["summary"], "entitled_to_all": True}
        )
        services.publish_version(None, app, version=version, manifest=manifest)
    stdout.write(
        f"catalog: flavors {', '.join(f['name'] for f in FLAVORS)}; apps {', '.join(a[0] for a in APPS)}"
    )
