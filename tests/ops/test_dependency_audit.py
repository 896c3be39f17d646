"""The dependency audit of `make test` (scripts/audit_dependencies.py): what fails the
run, what a waiver lets through, and that requirements.lock pins every dependency
pyproject.toml declares (the lock is what pip-audit reads)."""

from __future__ import annotations

import importlib.util
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.processes import ROOT

_spec = importlib.util.spec_from_file_location("audit_dependencies", ROOT / "scripts/audit_dependencies.py")
audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit)

# A report as pip-audit's JSON output shapes it.
REPORT = {
    "dependencies": [
        {"name": "django", "version": "5.2.0", "vulns": []},
        {
            "name": "jinja2",
            "version": "3.1.2",
            "vulns": [
                {
                    "id": "GHSA-h5c8-rqwp-cp95",
                    "aliases": ["CVE-2024-22195"],
                    "fix_versions": ["3.1.3"],
                    "description": "...",
                }
            ],
        },
    ],
    "fixes": [],
}


def test_a_known_vulnerability_fails_the_audit():
    found, unaudited = audit.verdict(REPORT, {})
    assert found == ["jinja2 3.1.2: GHSA-h5c8-rqwp-cp95 (fixed in 3.1.3)"]
    assert unaudited == []


@pytest.mark.parametrize("waived", ["GHSA-h5c8-rqwp-cp95", "CVE-2024-22195"])
def test_a_waiver_with_a_reason_lets_it_through(waived):
    waivers = audit.read_waivers(f"# comment\n{waived} only the test suite renders templates with it\n")
    assert waivers == {waived: "only the test suite renders templates with it"}
    assert audit.verdict(REPORT, waivers) == ([], [])


def test_a_waiver_needs_a_reason():
    with pytest.raises(ValueError, match="without a reason"):
        audit.read_waivers("GHSA-h5c8-rqwp-cp95\n")


def test_the_shipped_waivers_all_give_a_reason():
    audit.read_waivers(audit.WAIVERS.read_text())


def test_a_package_the_source_did_not_answer_for_is_reported_unaudited():
    report = {
        "dependencies": [
            {
                "name": "amqp",
                "skip_reason": "Dependency not found on PyPI and could not be audited: amqp (5.4.2)",
            }
        ]
    }
    found, unaudited = audit.verdict(report, {})
    assert found == []
    assert unaudited == ["amqp: Dependency not found on PyPI and could not be audited: amqp (5.4.2)"]


def test_the_lock_pins_every_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {
        canonicalize_name(found[1]): found[2]
        for found in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", audit.LOCK.read_text(), re.MULTILINE)
    }
    extras = project["optional-dependencies"]
    for line in project["dependencies"] + extras["demo"] + extras["dev"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements.lock: compile it again (docs/operations.md)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside {requirement.specifier}"
        )
