from __future__ import annotations

import pytest

from apps.core import simulation
from apps.core.models import SimulatedFault
from apps.storage.drivers.ddn import lustre_nodemap
from tests.support.fake_ddn import FakeDdn
from tests.support.fake_ufm import FakeUfm


class SimulatedStorage:
    """The simulated DDN and UFM, read and troubled through their state rows."""

    def quota_gb(self, path: str) -> int | None:
        directory = simulation.get("ddn", "directory", path)
        return None if directory is None else directory.state["quota_gb"]

    def fill(self, path: str, used_bytes: int) -> None:
        with simulation.locked("ddn", "directory", path) as directory:
            simulation.update(directory, used_bytes=used_bytes)

    def has_pkey(self, pkey: str) -> bool:
        return simulation.get("ufm", "pkey", pkey) is not None

    def members(self, storage) -> dict:
        """Who may reach the tenant's files: the NodeMap's nodes, the PKey's GUIDs."""
        nodemap = simulation.get("ddn", "nodemap", storage.nodemap)
        pkey = simulation.get("ufm", "pkey", storage.pkey)
        return {"nodemap": nodemap.state["nodes"], "pkey": pkey.state["guids"]}

    def fail_once(self, system: str, operation: str) -> str:
        """The next ``operation`` on ``system`` fails (worth a retry); the text its error carries."""
        SimulatedFault.objects.create(system=system, operation=operation, remaining=1, message="backend down")
        return "backend down"


class RealStorage:
    """The real drivers against a fake MGS (sshd + lfs/lctl) and a fake UFM."""

    def __init__(self, ddn: FakeDdn, ufm: FakeUfm):
        self.ddn, self.ufm = ddn, ufm

    def quota_gb(self, path: str) -> int | None:
        return self.ddn.quota_gb(path)

    def fill(self, path: str, used_bytes: int) -> None:
        self.ddn.fill(path, used_bytes)

    def has_pkey(self, pkey: str) -> bool:
        return f"0x{int(pkey, 16):04x}" in self.ufm.pkeys

    def members(self, storage) -> dict:
        """Node hostnames here are their addresses, and GUIDs written as UFM writes them."""
        ranges = self.ddn.state()["nodemaps"][lustre_nodemap(storage.nodemap)]["ranges"]
        return {
            "nodemap": sorted(nid.removesuffix("@o2ib") for nid in ranges),
            "pkey": sorted(f"0x{guid}" for guid in self.ufm.guids(f"0x{int(storage.pkey, 16):04x}")),
        }

    def fail_once(self, system: str, operation: str) -> str:
        if system == "ddn":
            self.ddn.fail_next("Input/output error")  # an OST in recovery, as lfs says it
            return "Input/output error"
        self.ufm.fail_next = [503]
        return "503"


@pytest.fixture
def fake_ddn(settings, tmp_path):
    server = FakeDdn(tmp_path / "mgs")
    for name, value in server.settings().items():
        setattr(settings, name, value)
    yield server
    server.close()


@pytest.fixture
def fake_ufm(settings):
    server = FakeUfm(password="s3cret")
    settings.UFM_URL, settings.UFM_PASSWORD, settings.UFM_TOKEN = server.url, "s3cret", ""
    yield server
    server.close()


@pytest.fixture(params=["simulated", "real"])
def storage_backend(request, settings):
    """Each kind of DDN and UFM driver in turn: the simulated ones, then the real ones
    against local servers that speak SSH + lfs/lctl and UFM's REST API."""
    if request.param == "simulated":
        return SimulatedStorage()
    settings.DRIVERS = {"*": "simulated", "ddn": "real", "ufm": "real"}
    return RealStorage(request.getfixturevalue("fake_ddn"), request.getfixturevalue("fake_ufm"))
