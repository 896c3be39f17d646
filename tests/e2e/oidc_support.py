"""The test OpenID provider (``tests/e2e/oidc_provider``, panva/oidc-provider on
Node) as a subprocess, and the portal settings that point OIDC login at it."""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from apps.tenancy.auth import oidc
from tests.support.processes import terminate

PROVIDER_DIR = Path(__file__).parent / "oidc_provider"
CLIENT_ID = "gpuaas-portal"
CLIENT_SECRET = "portal-client-secret-for-tests"
READY_PREFIX = "oidc-provider ready "


class OpenIDProvider:
    """One provider process with its own signing key and account claims file.

    The key is generated here and handed to the provider, so a test can also sign
    tokens the way the provider does (same key and ``kid``) with claims it chooses.
    """

    def __init__(self, workdir: Path, portal_url: str):
        self.workdir = workdir
        self.portal_url = portal_url
        self.accounts_file = workdir / "accounts.json"
        self.accounts: dict[str, dict] = {}
        self._write_accounts()
        self.kid = uuid.uuid4().hex
        self.private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.jwks_file = workdir / "jwks.json"
        private_jwk = json.loads(RSAAlgorithm.to_jwk(self.private_key))
        private_jwk.pop("key_ops")  # PyJWT says "sign"; the provider verifies with it too (id_token_hint)
        private_jwk.update({"kid": self.kid, "use": "sig", "alg": "RS256"})
        self.jwks_file.write_text(json.dumps({"keys": [private_jwk]}))
        self.stderr_file = workdir / "provider.stderr"
        self.process: subprocess.Popen | None = None
        self.issuer = ""

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def set_claims(self, login: str, **claims) -> None:
        """Claims the provider returns for ``login`` from now on (it re-reads the file)."""
        self.accounts[login] = claims
        self._write_accounts()

    def _write_accounts(self) -> None:
        self.accounts_file.write_text(json.dumps(self.accounts))

    def sign(self, claims: dict, *, key=None) -> str:
        return jwt.encode(claims, key or self.private_key, algorithm="RS256", headers={"kid": self.kid})

    def start(self, timeout: float = 15.0) -> OpenIDProvider:
        node = shutil.which("node")
        if node is None:
            pytest.fail("node is not on PATH: the OIDC tests run a real OpenID provider on Node.js")
        if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
            pytest.fail(f"{PROVIDER_DIR}/node_modules is missing: run `make node-deps` first")
        args = {
            "client-id": CLIENT_ID,
            "client-secret": CLIENT_SECRET,
            "redirect-uri": f"{self.portal_url}/oidc/callback/",
            "post-logout-redirect-uri": f"{self.portal_url}/accounts/login/",
            "accounts-file": str(self.accounts_file),
            "jwks-file": str(self.jwks_file),
        }
        with self.stderr_file.open("w") as stderr:
            self.process = subprocess.Popen(
                [node, "server.js", *(f"--{name}={value}" for name, value in args.items())],
                cwd=PROVIDER_DIR,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.issuer = self._wait_for_ready(timeout)
        return self

    def _wait_for_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                line = self.process.stdout.readline()
                if line.startswith(READY_PREFIX):
                    return line.removeprefix(READY_PREFIX).strip()
            if self.process.poll() is not None:
                break
        self.stop()
        pytest.fail(f"the OpenID provider did not start:\n{self.stderr_file.read_text()}")

    def stop(self) -> None:
        if self.process:
            terminate(self.process, timeout=5)
            if self.process.stdout:
                self.process.stdout.close()


def use_provider(settings, provider: OpenIDProvider) -> None:
    """Point the portal's OIDC login at ``provider``, as the GPUAAS_OIDC_* variables would."""
    settings.OIDC_ENABLED = True
    settings.OIDC_DISCOVERY_URL = provider.discovery_url
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    backend = "apps.tenancy.auth.oidc.PlatformOIDCBackend"
    others = [path for path in settings.AUTHENTICATION_BACKENDS if path != backend]
    settings.AUTHENTICATION_BACKENDS = [backend, *others]
    oidc.forget_discovery()
