"""A real VictoriaMetrics (Debian's ``victoria-metrics``) for tests: its own data
directory and port, scraping every second the targets of a file_sd file that the
platform writes (``GPUAAS_METRICS_TARGETS_FILE``), with the limits of the shipped
scrape configuration (``docker/victoria-metrics/scrape.yml``)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx
import yaml

from tests.support.processes import free_port, terminate

BINARY = "victoria-metrics"
SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "docker" / "victoria-metrics" / "scrape.yml"


def scrape_config(targets: Path) -> str:
    """The shipped configuration, scraping every second the targets in ``targets``."""
    config = yaml.safe_load(SHIPPED_CONFIG.read_text())
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s"}
    [job] = config["scrape_configs"]
    job["file_sd_configs"] = [{"files": [str(targets)]}]
    return yaml.safe_dump(config)


class VictoriaMetrics:
    def __init__(self, root: Path):
        if shutil.which(BINARY) is None:
            raise RuntimeError("victoria-metrics is not installed (make metrics-db installs it)")
        root.mkdir(parents=True, exist_ok=True)
        self.targets = root / "targets.json"
        self.targets.write_text("[]")
        config = root / "scrape.yml"
        config.write_text(scrape_config(self.targets))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "victoria-metrics.log"
        # One client: a client per call builds an SSL context (about 24 ms of CPU), and
        # tests poll this server hundreds of times.
        self.http = httpx.Client(base_url=self.url, timeout=30)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    BINARY,
                    f"-storageDataPath={root / 'data'}",
                    f"-httpListenAddr=127.0.0.1:{self.port}",
                    f"-promscrape.config={config}",
                    "-promscrape.fileSDCheckInterval=1s",
                    # Answer up to the present: tests read what was scraped a second ago.
                    "-search.latencyOffset=0s",
                    "-search.disableCache",
                    "-retentionPeriod=1y",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait_healthy()

    def _wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"victoria-metrics exited: {self.log_path.read_text()[-2000:]}")
            try:
                if self.http.get("/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("victoria-metrics did not become healthy")

    def import_prometheus(self, text: str) -> None:
        """Samples in Prometheus text format with millisecond timestamps, searchable on return."""
        self.http.post("/api/v1/import/prometheus", content=text.encode()).raise_for_status()
        self.flush()

    def flush(self) -> None:
        """What the server has stored so far, searchable now: what it scraped otherwise
        waits in its buffers, 8 to 10 s from the scrape before a query finds it
        (1.79, 2026-11-29); tests waiting on a scrape waited that long each time."""
        self.http.get("/internal/force_flush").raise_for_status()

    def query(self, query: str) -> list[tuple[dict, str]]:
        """An instant query now (after a flush): each series' labels and value."""
        self.flush()
        response = self.http.get("/api/v1/query", params={"query": query}, timeout=10)
        response.raise_for_status()
        return [(r["metric"], r["value"][1]) for r in response.json()["data"]["result"]]

    def series(self, match: str) -> list[dict]:
        """The series ``match`` selects (after a flush)."""
        self.flush()
        response = self.http.get("/api/v1/series", params={"match[]": match}, timeout=10)
        response.raise_for_status()
        return response.json()["data"]

    def stop(self) -> None:
        self.http.close()
        terminate(self.process, timeout=15)
