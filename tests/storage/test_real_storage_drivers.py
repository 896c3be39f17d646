"""The real DDN driver (SSH to the MGS, ``lfs``/``lctl``) against a real sshd with fake
Lustre tools, and the real UFM driver against a server speaking UFM's REST API: what
they leave on the systems, and how they fail."""

from __future__ import annotations

import pytest

from apps.core.drivers import DriverError
from apps.storage.drivers.ddn import SshDdn, lustre_nodemap
from apps.storage.drivers.ufm import HttpUfm
from tests.support.fake_ddn import host_key

GB = 2**30


@pytest.fixture
def ddn(fake_ddn):
    return SshDdn()


@pytest.fixture
def ufm(fake_ufm):
    return HttpUfm()


def test_a_tenant_directory_gets_a_project_quota_and_a_nodemap_of_its_nodes(ddn, fake_ddn):
    ddn.create_directory("/lustre/acme/", 1000, 0x0101)
    ddn.create_directory("/lustre/acme/", 1000, 0x0101)  # safe to run twice
    ddn.create_nodemap("nm-acme", "/lustre/acme/")
    ddn.create_nodemap("nm-acme", "/lustre/acme/")
    ddn.add_node("nm-acme", "127.0.0.1")
    ddn.add_node("nm-acme", "localhost")  # the same node by name: already in

    state = fake_ddn.state()
    assert state["directories"]["/lustre/acme"]["project"] == 0x0101
    assert state["directories"]["/lustre/acme"]["inherit"] is True
    assert fake_ddn.quota_gb("/lustre/acme/") == 1000
    nodemap = state["nodemaps"][lustre_nodemap("nm-acme")]
    assert nodemap == {"fileset": "/acme", "admin": 0, "trusted": 0, "ranges": ["127.0.0.1@o2ib"]}
    assert state["active"] is True

    ddn.set_quota("/lustre/acme/", 2500)
    assert fake_ddn.quota_gb("/lustre/acme/") == 2500
    fake_ddn.fill("/lustre/acme/", 300 * GB + 1)
    assert ddn.used_bytes("/lustre/acme/") == 300 * GB + 1024  # lfs counts whole KiB

    ddn.remove_node("nm-acme", "127.0.0.1")
    ddn.remove_node("nm-acme", "127.0.0.1")  # gone already: nothing to do
    assert fake_ddn.state()["nodemaps"][lustre_nodemap("nm-acme")]["ranges"] == []


def test_latency_is_how_long_lfs_df_takes_on_the_mgs(ddn, fake_ddn):
    ddn.create_directory("/lustre/acme/", 10, 0x0101)
    fake_ddn.slow_df(40)
    assert ddn.latency_ms("/lustre/acme/") >= 40


def test_any_tenant_id_makes_a_nodemap_name_lustre_accepts(ddn, fake_ddn):
    tenant_id = "Acme.Research-Division_" + "x" * 41  # 64 characters, '.' and '-' included
    ddn.create_directory(f"/lustre/{tenant_id}/", 10, 0x0102)
    ddn.create_nodemap(f"nm-{tenant_id}", f"/lustre/{tenant_id}/")
    name = lustre_nodemap(f"nm-{tenant_id}")
    assert fake_ddn.state()["nodemaps"][name]["fileset"] == f"/{tenant_id}"
    assert name != lustre_nodemap("nm-acme")


def test_a_node_still_in_another_tenants_nodemap_is_not_added(ddn, fake_ddn):
    for tenant in ("acme", "globex"):
        ddn.create_directory(f"/lustre/{tenant}/", 10, 0x0100 + len(tenant))
        ddn.create_nodemap(f"nm-{tenant}", f"/lustre/{tenant}/")
    ddn.add_node("nm-acme", "127.0.0.1")
    with pytest.raises(DriverError, match="still in NodeMap") as refused:
        ddn.add_node("nm-globex", "127.0.0.1")
    assert refused.value.transient is False
    assert fake_ddn.state()["nodemaps"][lustre_nodemap("nm-globex")]["ranges"] == []


@pytest.mark.parametrize(
    "path",
    [
        "/lustre/acme;touch /tmp/owned/",
        "/lustre/$(id)/",
        "/lustre/a b/",
        "/lustre/../etc/",
        "/lustre/acme/../../",
        "/etc/",
        "/lustre/" + "x" * 65 + "/",
    ],
)
def test_a_directory_other_than_a_tenant_one_is_refused_before_ssh(ddn, fake_ddn, path):
    with pytest.raises(DriverError, match="not a tenant directory") as refused:
        ddn.create_directory(path, 10, 0x0101)
    assert refused.value.transient is False
    assert fake_ddn.calls() == []


def test_a_wrong_host_key_is_refused_for_good(settings, ddn, fake_ddn, tmp_path):
    impostor = host_key(tmp_path, "impostor")
    fake_ddn.known_hosts.write_text(f"[127.0.0.1]:{fake_ddn.port} {impostor}\n")
    with pytest.raises(DriverError, match="Host key verification failed") as refused:
        ddn.create_directory("/lustre/acme/", 10, 0x0101)
    assert refused.value.transient is False
    assert fake_ddn.calls() == []


def test_an_unknown_host_is_not_trusted_on_first_use(ddn, fake_ddn):
    fake_ddn.known_hosts.write_text("")
    with pytest.raises(DriverError, match="Host key verification failed"):
        ddn.used_bytes("/lustre/acme/")
    assert fake_ddn.known_hosts.read_text() == ""


def test_an_mgs_that_does_not_answer_in_time_is_worth_a_retry(settings, ddn, fake_ddn):
    settings.DDN_SSH_TIMEOUT = 2
    fake_ddn.hang(10)
    with pytest.raises(DriverError, match="did not answer within 2 s") as slow:
        ddn.create_directory("/lustre/acme/", 10, 0x0101)
    assert slow.value.transient is True


def test_an_mgs_that_is_down_is_worth_a_retry(settings, fake_ddn):
    settings.DDN_SSH_PERSIST = 0  # no connection kept from before
    fake_ddn.close()
    with pytest.raises(DriverError, match="cannot reach the DDN MGS") as down:
        SshDdn().create_directory("/lustre/acme/", 10, 0x0101)
    assert down.value.transient is True


def test_tool_errors_are_transient_only_when_the_file_system_is_busy(ddn, fake_ddn):
    ddn.create_directory("/lustre/acme/", 10, 0x0101)
    fake_ddn.fail_next("Input/output error")
    with pytest.raises(DriverError, match="Input/output error") as busy:
        ddn.set_quota("/lustre/acme/", 20)
    assert busy.value.transient is True
    with pytest.raises(DriverError, match="No such file or directory") as missing:
        ddn.set_quota("/lustre/globex/", 20)
    assert missing.value.transient is False
    with pytest.raises(DriverError, match="No such file or directory") as no_map:
        ddn.add_node("nm-nobody", "127.0.0.1")
    assert no_map.value.transient is False


def test_the_ddn_driver_names_the_settings_it_lacks(settings):
    settings.DDN_SSH_HOST, settings.DDN_SSH_KNOWN_HOSTS = "mgs.example", ""
    with pytest.raises(DriverError, match="GPUAAS_DDN_SSH_KEY_FILE, GPUAAS_DDN_SSH_KNOWN_HOSTS"):
        SshDdn()


def test_a_partition_key_is_made_once_and_its_guids_come_and_go(ufm, fake_ufm):
    ufm.create_pkey("0101")
    ufm.create_pkey("0101")
    assert [call[1] for call in fake_ufm.calls if call[0] == "POST"] == ["/add"]
    ufm.add_guids("0101", ["0x0000000000000abc", "00:00:00:00:00:00:0A:BD"])
    assert fake_ufm.guids("0x0101") == {"0000000000000abc", "0000000000000abd"}
    ufm.remove_guids("0101", ["0x0000000000000abc"])
    assert fake_ufm.guids("0x0101") == {"0000000000000abd"}
    ufm.remove_guids("0202", ["0x0000000000000abc"])  # no such key: nothing of ours in it


def test_ufm_access_tokens_work_in_place_of_a_password(settings, fake_ufm):
    settings.UFM_PASSWORD, settings.UFM_TOKEN = "", fake_ufm.token
    HttpUfm().create_pkey("0101")
    assert "0x0101" in fake_ufm.pkeys


def test_ufm_failures_are_transient_only_on_its_side(settings, ufm, fake_ufm):
    fake_ufm.fail_next = [503]
    with pytest.raises(DriverError, match="503") as busy:
        ufm.create_pkey("0101")
    assert busy.value.transient is True

    with pytest.raises(DriverError, match="not port GUIDs") as bad:
        ufm.add_guids("0101", ["0xnot-a-guid"])
    assert bad.value.transient is False

    settings.UFM_PASSWORD = "wrong"
    with pytest.raises(DriverError, match="credentials") as refused:
        HttpUfm().create_pkey("0101")
    assert refused.value.transient is False
    assert "wrong" not in str(refused.value)


def test_ufm_unreachable_is_worth_a_retry(settings, fake_ufm):
    fake_ufm.close()
    with pytest.raises(DriverError, match="UFM unreachable") as down:
        HttpUfm().create_pkey("0101")
    assert down.value.transient is True
