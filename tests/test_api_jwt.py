"""``api.auth: jwt``: bearer JWTs verified against a JWKS a real HTTP server on loopback serves (or a key file),
with tokens the test signs. Valid tokens act as their ``sub`` (or the hook's user); expired, not yet valid, wrong
audience, wrong issuer, wrong key, ``alg: none``, HS256 signed with the public key, malformed: all 401 with
``WWW-Authenticate: Bearer``; a claim that is not a user id is 403; a JWKS that is down is 503 with one log line;
two users from two tokens see each other's threads as 404. Neither tokens nor keys reach a log."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError
from temporalio.client import Client

from workers.api.auth import Authenticator
from workers.api.jwt_auth import AuthConfigError
from workers.config import ConfigError, HartflowConfig, load_config
from workers.devserver import free_port
from workers.testing import make_config, serving_api

ISSUER = "https://idp.example/"
AUDIENCE = "hartflow-api"
JWT_OK = {"jwks_url": "https://idp.example/jwks", "issuer": ISSUER, "audience": AUDIENCE}
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC_PEM = KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def public_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig"}


class JwksServer:
    """A JWKS endpoint on loopback: ``document`` is what it serves, ``fetches`` how often it was asked."""

    def __init__(self, *keys: dict[str, Any]) -> None:
        self.document: dict[str, Any] = {"keys": list(keys)}
        self.fetches = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.fetches += 1
                body = json.dumps(owner.document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/.well-known/jwks.json"

    @contextlib.contextmanager
    def running(self) -> Iterator[JwksServer]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join()


def claims(sub: Any = "alice", **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now, "nbf": now, "exp": now + 600, **extra}


def sign(payload: dict[str, Any], key: Any = KEY, kid: str | None = "k1", alg: str = "RS256") -> str:
    payload = {name: value for name, value in payload.items() if value is not None}
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid} if kid else None)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], payload: dict[str, Any], secret: bytes | None) -> str:
    """A token PyJWT refuses to make: ``alg: none``, or HS256 keyed with the public key (algorithm confusion)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    signature = b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def tampered(token: str, payload: dict[str, Any]) -> str:
    header, _, signature = token.split(".")
    return f"{header}.{b64(json.dumps(payload).encode())}.{signature}"


def jwt_api(jwt_settings: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"auth": "jwt", "jwt": {"issuer": ISSUER, "audience": AUDIENCE, **jwt_settings}, **extra}


@pytest.fixture
def jwks() -> Iterator[JwksServer]:
    with JwksServer(public_jwk(KEY, "k1")).running() as server:
        yield server


@pytest.fixture
def jwt_config(home: Path, temporal_address: str, jwks: JwksServer) -> HartflowConfig:
    return make_config(home, temporal_address, api=jwt_api({"jwks_url": jwks.url}))


@pytest.fixture
async def base_url(jwt_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with serving_api(jwt_config, client) as url:
        yield url


async def status_of(url: str, token: str | None, **headers: str) -> httpx.Response:
    sent = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as api:
        return await api.post("/threads/search", json={}, headers={**sent, **headers})


async def test_two_users_from_two_tokens_see_each_others_threads_as_not_found(base_url: str) -> None:
    alice = get_client(url=base_url, api_key=sign(claims("alice")))
    bob = get_client(url=base_url, api_key=sign(claims("bob")))
    thread_id = (await alice.threads.create(metadata={"owner": "alice"}))["thread_id"]
    with pytest.raises(NotFoundError):
        await bob.threads.get(thread_id)
    with pytest.raises(NotFoundError):
        await bob.threads.delete(thread_id)
    assert thread_id not in [t["thread_id"] for t in await bob.threads.search()]
    assert (await alice.threads.get(thread_id))["metadata"] == {"owner": "alice"}
    async with httpx.AsyncClient(base_url=base_url) as api:  # Authorization: Bearer, as well as the SDK's x-api-key
        seen = await api.get(f"/threads/{thread_id}", headers={"Authorization": f"Bearer {sign(claims('alice'))}"})
        assert seen.status_code == 200
        assert (await api.get("/ok")).status_code == 200  # readiness probes carry no token


async def test_every_bad_token_is_401(base_url: str, caplog: pytest.LogCaptureFixture, capfd: Any) -> None:
    now = int(time.time())
    header = {"alg": "RS256", "typ": "JWT", "kid": "k1"}
    bad = {
        "expired": sign(claims(exp=now - 3600, iat=now - 7200, nbf=now - 7200)),
        "not yet valid": sign(claims(nbf=now + 3600)),
        "issued in the future": sign(claims(iat=now + 3600)),
        "wrong audience": sign(claims(aud="another-service")),
        "wrong issuer": sign(claims(iss="https://evil.example/")),
        "no expiry": sign(claims(exp=None)),
        "no audience": sign(claims(aud=None)),
        "wrong key": sign(claims(), key=OTHER_KEY),
        "unknown kid": sign(claims(), kid="k-unknown"),
        "no kid": sign(claims(), kid=None),
        "alg none": forged({**header, "alg": "none"}, claims(), None),
        "HS256 with the public key": forged({**header, "alg": "HS256"}, claims(), PUBLIC_PEM),
        "ES256 not allowed": sign(claims(), key=ec.generate_private_key(ec.SECP256R1()), alg="ES256"),
        "tampered payload": tampered(sign(claims("alice")), claims("bob")),
        "malformed": "not-a-jwt",
        "three garbage parts": "abc.def.ghi",
        "header not json": f"{b64(b'{oops')}.{b64(b'{}')}.sig",
        "alg a list": forged({**header, "alg": ["RS256"]}, claims(), None),
        "kid a number": forged({**header, "kid": 7}, claims(), None),
    }
    with caplog.at_level(logging.DEBUG):
        for name, token in bad.items():
            refused = await status_of(base_url, token)
            assert refused.status_code == 401, (name, refused.text)
            assert refused.headers["www-authenticate"].startswith("Bearer"), name
            assert token not in refused.text
        missing = await status_of(base_url, None)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert (await status_of(base_url, sign(claims()))).status_code == 200
    logged = caplog.text + "".join(capfd.readouterr())
    assert "Traceback" not in logged
    for token in bad.values():
        assert token not in logged
    assert public_jwk(KEY, "k1")["n"] not in logged


async def test_clock_skew_within_the_leeway_is_accepted(base_url: str) -> None:
    now = int(time.time())
    assert (await status_of(base_url, sign(claims(exp=now - 5)))).status_code == 200  # leeway_seconds: 30
    assert (await status_of(base_url, sign(claims(nbf=now + 5)))).status_code == 200
    assert (await status_of(base_url, sign(claims(exp=now - 300)))).status_code == 401


async def test_a_claim_that_is_not_a_user_id_is_403(base_url: str, capfd: Any) -> None:
    for sub in ("../../etc", "a/b", "", "x" * 129, 42, ["alice"], None, "ünïcode"):
        refused = await status_of(base_url, sign(claims(sub)))
        assert refused.status_code == 403, (sub, refused.text)
        assert "claim 'sub'" in refused.json()["detail"]
    assert "Traceback" not in "".join(capfd.readouterr())


async def test_the_user_claim_is_configurable(
    client: Client, home: Path, temporal_address: str, jwks: JwksServer
) -> None:
    config = make_config(home, temporal_address, api=jwt_api({"jwks_url": jwks.url, "user_claim": "uid"}))
    async with serving_api(config, client) as url:
        token = sign(claims("ignored", uid="carol"))
        thread_id = (await get_client(url=url, api_key=token).threads.create())["thread_id"]
        assert (home / "users" / "carol" / "threads" / thread_id).is_dir()
        assert (await status_of(url, sign(claims("carol")))).status_code == 403  # no uid claim


async def test_a_new_kid_refetches_the_jwks(
    client: Client, home: Path, temporal_address: str, jwks: JwksServer
) -> None:
    config = make_config(home, temporal_address, api=jwt_api({"jwks_url": jwks.url, "jwks_refetch_seconds": 0}))
    async with serving_api(config, client) as url:
        assert (await status_of(url, sign(claims()))).status_code == 200
        assert (await status_of(url, sign(claims()))).status_code == 200
        assert jwks.fetches == 1  # cached
        jwks.document["keys"].append(public_jwk(OTHER_KEY, "k2"))  # the provider rotates its keys
        assert (await status_of(url, sign(claims(), key=OTHER_KEY, kid="k2"))).status_code == 200
        assert jwks.fetches == 2


async def test_unknown_kids_do_not_hammer_the_jwks(
    client: Client, home: Path, temporal_address: str, jwks: JwksServer
) -> None:
    config = make_config(home, temporal_address, api=jwt_api({"jwks_url": jwks.url, "jwks_refetch_seconds": 3600}))
    async with serving_api(config, client) as url:
        assert (await status_of(url, sign(claims()))).status_code == 200
        for attempt in range(5):
            assert (await status_of(url, sign(claims(), kid=f"made-up-{attempt}"))).status_code == 401
        assert jwks.fetches == 1


async def test_a_jwks_that_is_down_is_503_and_one_log_line(
    client: Client, home: Path, temporal_address: str, caplog: pytest.LogCaptureFixture, capfd: Any
) -> None:
    down = f"http://127.0.0.1:{free_port()}/jwks.json"
    config = make_config(home, temporal_address, api=jwt_api({"jwks_url": down}))
    token = sign(claims())
    async with serving_api(config, client) as url:
        with caplog.at_level(logging.INFO):
            refused = await status_of(url, token)
    assert refused.status_code == 503 and refused.headers["retry-after"]
    assert "api.jwt.jwks_url" in refused.json()["detail"]
    (line,) = [record for record in caplog.records if record.name.startswith("hartflow")]
    assert line.levelno == logging.WARNING and line.exc_info is None and "jwks_url" in line.getMessage()
    logged = caplog.text + "".join(capfd.readouterr())
    assert "Traceback" not in logged and token not in logged
    # A malformed token is refused before any key is needed.
    async with serving_api(config, client) as url:
        assert (await status_of(url, "not-a-jwt")).status_code == 401


async def test_a_key_file(client: Client, home: Path, temporal_address: str, tmp_path: Path) -> None:
    pem = tmp_path / "idp.pem"
    pem.write_bytes(PUBLIC_PEM)
    keyset = tmp_path / "jwks.json"
    keyset.write_text(json.dumps({"keys": [public_jwk(KEY, "k1"), public_jwk(OTHER_KEY, "k2")]}))
    for key_file in (pem, keyset):
        config = make_config(home, temporal_address, api=jwt_api({"key_file": str(key_file)}))
        async with serving_api(config, client) as url:
            assert (await status_of(url, sign(claims()))).status_code == 200, key_file
            assert (await status_of(url, sign(claims(), kid=None))).status_code == (200 if key_file == pem else 401)
            assert (await status_of(url, sign(claims(), key=OTHER_KEY, kid="k1"))).status_code == 401
            confused = forged({"alg": "HS256", "kid": "k1"}, claims(), PUBLIC_PEM)
            assert (await status_of(url, confused)).status_code == 401


async def test_the_hook_chooses_the_user(
    client: Client, home: Path, temporal_address: str, jwks: JwksServer, caplog: pytest.LogCaptureFixture, capfd: Any
) -> None:
    api = jwt_api({"jwks_url": jwks.url}, auth_hook="tests.support.auth_hooks:team_user")
    config = make_config(home, temporal_address, api=api)
    async with serving_api(config, client) as url:
        red, blue = sign(claims("alice", team="red")), sign(claims("alice", team="blue"))
        thread_id = (await get_client(url=url, api_key=red).threads.create())["thread_id"]
        assert (home / "users" / "red-alice" / "threads" / thread_id).is_dir()
        with pytest.raises(NotFoundError):
            await get_client(url=url, api_key=blue).threads.get(thread_id)
        assert (await status_of(url, red, **{"x-team": "none"})).status_code == 401  # the hook returned None
        blocked = await status_of(url, sign(claims(group="blocked")))
        assert blocked.status_code == 403 and blocked.json()["detail"] == "group 'blocked' may not use the agent"
        assert (await status_of(url, sign(claims("..", team="x")))).status_code == 403  # 'x-..' is no user id
        with caplog.at_level(logging.INFO):
            crashed = await status_of(url, sign(claims(boom=True)))
        assert crashed.status_code == 401
        (line,) = [record for record in caplog.records if record.name.startswith("hartflow")]
        assert "api.auth_hook raised RuntimeError" in line.getMessage() and line.exc_info is None
        assert "Traceback" not in caplog.text + "".join(capfd.readouterr())
    config = make_config(home, temporal_address, api={**api, "auth_hook": "tests.support.auth_hooks:async_user"})
    async with serving_api(config, client) as url:
        token = sign(claims("ignored", email="dave@example.com"))
        thread_id = (await get_client(url=url, api_key=token).threads.create())["thread_id"]
        assert (home / "users" / "dave" / "threads" / thread_id).is_dir()
        assert (await status_of(url, sign(claims()))).status_code == 401  # no email: None


@pytest.mark.parametrize(
    ("api", "named"),
    [
        ({"auth": "jwt"}, "api.jwt"),
        (jwt_api({}), "exactly one of jwks_url and key_file"),
        (jwt_api({"jwks_url": "https://idp.example/jwks", "key_file": "/k.pem"}), "exactly one of"),
        (jwt_api({"jwks_url": "file:///etc/passwd"}), "'api.jwt.jwks_url'"),
        (jwt_api({"jwks_url": "https://i/j", "algorithms": ["HS256"]}), "'api.jwt.algorithms.0'"),
        (jwt_api({"jwks_url": "https://i/j", "algorithms": ["none"]}), "'api.jwt.algorithms.0'"),
        (jwt_api({"jwks_url": "https://i/j", "algorithms": []}), "'api.jwt.algorithms'"),
        (jwt_api({"jwks_url": "https://i/j", "leeway_seconds": -1}), "'api.jwt.leeway_seconds'"),
        (jwt_api({"jwks_url": "https://i/j", "audience": ""}), "'api.jwt.audience"),
        (jwt_api({"jwks_url": "https://i/j", "issuer": ""}), "'api.jwt.issuer'"),
        (jwt_api({"jwks_url": "https://i/j", "secret": "x"}), "unknown key 'api.jwt.secret'"),
        ({"auth": "bearer", "tokens": [{"user_id": "a", "token_sha256": "0" * 64}], "jwt": JWT_OK}, "only with"),
        ({"auth": "none", "auth_hook": "a.b:c"}, "only with auth 'jwt', not 'none'"),
        (jwt_api({"jwks_url": "https://i/j"}, auth_hook="no_colon"), "package.module:function"),
    ],
)
def test_bad_jwt_settings_name_the_key(api: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match="invalid config") as refused:
        load_config(overrides={"api": api}, environ={})
    assert named in str(refused.value)


def test_unusable_key_files_and_hooks_are_refused_at_start(tmp_path: Path) -> None:
    private = tmp_path / "private.pem"
    private.write_bytes(
        KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    ec_public = tmp_path / "ec.pem"
    ec_public.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("hello")
    cases = [
        ({"key_file": str(tmp_path / "missing.pem")}, None, "api.jwt.key_file: cannot read"),
        ({"key_file": str(private)}, None, "holds a private key"),
        ({"key_file": str(garbage)}, None, "is not a PEM public key"),
        ({"key_file": str(ec_public)}, None, "api.jwt.algorithms"),
        ({"jwks_url": "https://i/j"}, "no_such_package.hooks:f", "api.auth_hook: cannot import no_such_package"),
        ({"jwks_url": "https://i/j"}, "tests.support.auth_hooks:missing", "has no 'missing'"),
        ({"jwks_url": "https://i/j"}, "tests.support.auth_hooks:NotAFunction", "is not a function"),
        ({"jwks_url": "https://i/j"}, "tests.support.auth_hooks:one_argument", "(claims, headers)"),
    ]
    for settings, hook, message in cases:
        config = load_config(overrides={"api": jwt_api(settings, auth_hook=hook)}, environ={})
        with pytest.raises(AuthConfigError, match=r"^api\.") as refused:
            Authenticator(config.api, config.user_id)
        assert message in str(refused.value), (settings, hook)
        assert "PRIVATE" not in str(refused.value)


def test_serve_refuses_a_bad_hook_before_starting(tmp_path: Path) -> None:
    config_file = tmp_path / "hartflow.yaml"
    api = jwt_api({"jwks_url": "https://idp.example/jwks"}, auth_hook="tests.support.auth_hooks:missing")
    config_file.write_text(yaml.safe_dump({"storage": {"home": str(tmp_path / "home")}, "api": api}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    result = subprocess.run(
        [sys.executable, "-m", "workers.cli", "serve", "--config", str(config_file), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "hartflow: error: api.auth_hook: module tests.support.auth_hooks has no 'missing'"
    ]
    assert not (tmp_path / "home").exists()
