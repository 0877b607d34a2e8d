"""The `auth` skill (SPEC A) against the portal's real tokens and JWKS: the owner's token is
the owner, another portal user's is `caller:<username>`; another agent's audience, expired,
an unknown or wrong key, `alg: none` and HS256-with-the-public-key are refused; a token of
another issuer is left to the `access:` block."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.access import AccessVerifier, Unauthorized
from webagents.agent_spec import AccessSpec
from webagents.caller import Caller
from webagents.context import AgentInfo
from webagents.errors import ConfigError
from webagents.portal.accounts import service as accounts
from webagents.portal.db.tables import SigningKey
from webagents.skills.auth import AuthSkill

from .conftest import make_account

PORTAL = "http://testserver"
HELPER = {"name": "helper", "instructions": "Be brief."}


def _bearer(db: Session, username: str) -> dict[str, str]:
    scope = make_account(db, username)
    return {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}


def _agent_token(client: TestClient, headers: dict[str, str], agent: str = "helper") -> str:
    answer = client.post("/api/agents/token", headers=headers, json={"agent": agent})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _skill(client: TestClient, folder: Path, agent_id: str) -> AuthSkill:
    (folder / ".webagents").mkdir(parents=True)
    (folder / ".webagents" / "config.json").write_text(
        json.dumps({"link": {"agentId": agent_id, "agentName": "helper", "portal": PORTAL}})
    )
    fetched: list[str] = []

    def serve(request: httpx.Request) -> httpx.Response:
        """The portal's JWKS and the owner's choice, as the portal answers at the time."""
        fetched.append(str(request.url))
        answer = client.get(request.url.path)
        return httpx.Response(answer.status_code, json=answer.json())

    skill = AuthSkill(http=httpx.AsyncClient(transport=httpx.MockTransport(serve)))
    skill.bind(AgentInfo(name="helper", directory=folder))
    skill.fetched = fetched  # type: ignore[attr-defined]
    return skill


@pytest.fixture
def world(client: TestClient, db: Session, tmp_path: Path) -> dict[str, Any]:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    made = client.post("/api/agents", headers=alice, json=HELPER).json()
    allowed = client.patch(
        f"/api/agents/{made['agent']['id']}", headers=alice, json={"allowOthers": True}
    )
    assert allowed.status_code == 200, allowed.text
    client.post("/api/agents", headers=bob, json={**HELPER, "name": "other"})
    skill = _skill(client, tmp_path / "helper", made["agent"]["id"])
    return {"alice": alice, "bob": bob, "skill": skill, "agent_id": made["agent"]["id"]}


async def test_a_the_owners_portal_token_is_the_owner_and_another_users_is_a_caller(
    client: TestClient, world: dict[str, Any]
) -> None:
    skill: AuthSkill = world["skill"]
    owner = _agent_token(client, world["alice"])
    other = _agent_token(client, world["bob"])
    assert await skill.caller(owner) == Caller.owner()
    assert await skill.caller(other) == Caller.verified("bob")
    assert skill.fetched == [  # type: ignore[attr-defined]
        f"{PORTAL}/.well-known/jwks.json",
        f"{PORTAL}/api/agents/{world['agent_id']}/access",  # the owner's choice, for bob's
    ]
    claims = jwt.decode(other, options={"verify_signature": False})
    assert (claims["aud"], claims["tier"], claims["sub"] != "") == (
        f"agent:{world['agent_id']}",
        "user",
        True,
    )
    await skill.aclose()


NOT_ALLOWED = (
    "the owner of 'helper' has not allowed other users to call it: ask them to allow others "
    "on the agent's page in the portal"
)


async def test_a_allow_others_off_refuses_a_users_token_at_the_portal_and_at_the_agent(
    client: TestClient, world: dict[str, Any]
) -> None:
    """Issue 21: the owner's choice holds on every path. A token minted while others were
    allowed is refused by the agent's verifier once the owner turns others off, and the
    portal then mints none; the owner's own token is served all along."""
    skill: AuthSkill = world["skill"]
    bobs = _agent_token(client, world["bob"])
    owners = _agent_token(client, world["alice"])
    assert await skill.caller(bobs) == Caller.verified("bob")
    off = client.patch(
        f"/api/agents/{world['agent_id']}", headers=world["alice"], json={"allowOthers": False}
    )
    assert off.status_code == 200, off.text
    with pytest.raises(Unauthorized) as refused:
        await skill.caller(bobs)
    assert str(refused.value) == (
        "the owner of this agent has not allowed other users to call it: ask them to allow "
        "others on the agent's page in the portal"
    )
    assert await skill.caller(owners) == Caller.owner()
    asked = client.post("/api/agents/token", headers=world["bob"], json={"agent": "helper"})
    assert (asked.status_code, asked.json()) == (
        403,
        {
            "error": {
                "message": NOT_ALLOWED,
                "type": "permission_error",
                "param": None,
                "code": "not_allowed",
            }
        },
    )
    await skill.aclose()


async def test_a_a_users_token_waits_for_the_owners_choice_503_when_the_portal_is_down(
    client: TestClient, world: dict[str, Any], tmp_path: Path
) -> None:
    """The keys are known but the owner's choice cannot be read: a user's token is neither
    taken nor called wrong (503, as for keys), and the owner's needs no asking."""
    from webagents.access import VerifierUnavailable

    folder = tmp_path / "half-down"
    (folder / ".webagents").mkdir(parents=True)
    (folder / ".webagents" / "config.json").write_text(
        json.dumps({"link": {"agentId": world["agent_id"], "portal": PORTAL}})
    )

    def keys_only(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/jwks.json":
            return httpx.Response(200, json=client.get(request.url.path).json())
        raise httpx.ConnectError("All connection attempts failed", request=request)

    skill = AuthSkill(http=httpx.AsyncClient(transport=httpx.MockTransport(keys_only)))
    skill.bind(AgentInfo(name="helper", directory=folder))
    assert await skill.caller(_agent_token(client, world["alice"])) == Caller.owner()
    with pytest.raises(VerifierUnavailable) as refused:
        await skill.caller(_agent_token(client, world["bob"]))
    assert str(refused.value) == (
        "the portal that verifies this agent's callers cannot be reached just now; try again "
        "shortly"
    )
    await skill.aclose()


def test_a_the_owners_choice_is_public_by_agent_id_and_an_unknown_agent_is_404(
    client: TestClient, world: dict[str, Any]
) -> None:
    """What the agent's verifier reads: `allowOthers` now, no credential needed; no cache."""
    url = f"/api/agents/{world['agent_id']}/access"
    allowed = client.get(url)
    assert (allowed.status_code, allowed.json(), allowed.headers["cache-control"]) == (
        200,
        {"allowOthers": True},
        "no-store",
    )
    client.patch(
        f"/api/agents/{world['agent_id']}", headers=world["alice"], json={"allowOthers": False}
    )
    assert client.get(url).json() == {"allowOthers": False}
    for unknown in ("00000000-0000-0000-0000-000000000000", "not-an-id"):
        missing = client.get(f"/api/agents/{unknown}/access")
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _forge(claims: dict[str, Any], header: dict[str, Any], sign: Any) -> str:
    head = _b64(json.dumps(header).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(sign(f'{head}.{body}'.encode()))}"


async def test_a_misdirected_expired_and_forged_portal_tokens_are_refused(
    client: TestClient, db: Session, world: dict[str, Any]
) -> None:
    skill: AuthSkill = world["skill"]
    good = _agent_token(client, world["bob"])
    claims = jwt.decode(good, options={"verify_signature": False})
    signing = db.scalars(select(SigningKey)).one()
    private = serialization.load_pem_private_key(signing.private_pem.encode(), password=None)
    public_pem = private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def real(payload: dict[str, Any]) -> str:
        return jwt.encode(
            payload, signing.private_pem, algorithm="RS256", headers={"kid": signing.kid}
        )

    cases = [
        (
            "another agent's audience",
            _agent_token(client, world["bob"], "other"),
            "the portal token is for another agent (audience)",
        ),
        (
            "the portal's own API",
            client.post("/api/auth/cli/token", headers=world["bob"], json={}).json()[
                "access_token"
            ],
            "the portal token is for another agent (audience)",
        ),
        (
            "expired",
            real({**claims, "iat": claims["iat"] - 7200, "exp": claims["iat"] - 3600}),
            "the portal token has expired: get a new one",
        ),
        (
            "a stranger's key under the portal's kid",
            jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": signing.kid}),
            "the portal token does not verify (Signature verification failed)",
        ),
        (
            "an unknown kid",
            jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": "nope"}),
            "the portal token is signed by a key the portal does not publish",
        ),
        (
            "alg none",
            _forge(claims, {"alg": "none", "kid": signing.kid}, lambda _: b""),
            "the portal's tokens are RS256, not 'none'",
        ),
        (
            "HS256 with the public key",
            _forge(
                claims,
                {"alg": "HS256", "kid": signing.kid},
                lambda data: hmac.new(public_pem, data, hashlib.sha256).digest(),
            ),
            "the portal's tokens are RS256, not 'HS256'",
        ),
    ]
    for name, token, message in cases:
        with pytest.raises(Unauthorized) as refused:
            await skill.caller(token)
        assert str(refused.value) == message, name
    await skill.aclose()


async def test_a_the_auth_skill_composes_with_the_access_block(
    client: TestClient, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAROL_KEY", "carol-secret-key")
    both = AccessVerifier(
        AccessSpec(keys={"carol@example.com": "env:CAROL_KEY"}), portal=world["skill"]
    )
    owner = _agent_token(client, world["alice"])
    assert await both.caller(f"Bearer {owner}", {}) == Caller.owner()
    assert await both.caller("Bearer carol-secret-key", {}) == Caller.verified("carol@example.com")
    assert await both.caller(None, {}) == Caller.anonymous()
    elsewhere = jwt.encode(
        {"iss": "https://id.example.com", "sub": "x", "aud": "helper", "exp": 2**31},
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        algorithm="RS256",
    )
    with pytest.raises(Unauthorized):  # not the portal's: the access block decides, and refuses
        await both.caller(f"Bearer {elsewhere}", {})
    # Whichever header carries it: a portal token in x-api-key is the portal's to decide too.
    assert await both.caller(None, {"x-api-key": owner}) == Caller.owner()
    assert both.describe() == f"tokens of the portal {PORTAL}, 1 API key"
    await both.aclose()


def test_a_the_auth_skill_needs_a_published_agent(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        AuthSkill().bind(AgentInfo(name="helper", directory=tmp_path))
    assert str(refused.value) == (
        "the auth skill verifies the portal's tokens for agent 'helper', which is not "
        "published: run webagents publish in its folder first"
    )


async def test_a_a_portal_that_cannot_be_reached_is_503_not_a_wrong_token(
    client: TestClient, world: dict[str, Any], tmp_path: Path
) -> None:
    """A token the agent cannot check because the portal is down is neither taken nor called
    wrong: 503 with Retry-After, the details in the owner's log; a cached key still works."""
    from webagents.access import VerifierUnavailable
    from webagents.server import AgentHost, ServedAgent, create_app
    from webagents.testing import FunctionModel

    owner = _agent_token(client, world["alice"])
    folder = tmp_path / "down"
    (folder / ".webagents").mkdir(parents=True)
    (folder / ".webagents" / "config.json").write_text(
        json.dumps({"link": {"agentId": world["agent_id"], "portal": PORTAL}})
    )

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("All connection attempts failed", request=request)

    skill = AuthSkill(http=httpx.AsyncClient(transport=httpx.MockTransport(down)))
    skill.bind(AgentInfo(name="helper", directory=folder))
    for _ in range(2):  # and again at once, before the next fetch is due
        with pytest.raises(VerifierUnavailable) as refused:
            await skill.caller(owner)
        assert str(refused.value) == (
            "the portal that verifies this agent's callers cannot be reached just now; try "
            "again shortly"
        )

    from webagents import Agent

    agent = Agent("helper", "Be brief.", model=FunctionModel(lambda r: "hi"))
    served = ServedAgent(agent, AccessVerifier(None, portal=skill))
    with TestClient(create_app(AgentHost([served]))) as app:
        answer = app.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {owner}"},
            json={"model": "helper", "messages": [{"role": "user", "content": "hi"}]},
        )
        key = app.post(
            "/v1/chat/completions",
            headers={"Authorization": "Bearer rok_not_a_token"},
            json={"model": "helper", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert (answer.status_code, answer.headers["retry-after"]) == (503, "1")
    assert answer.json()["error"]["code"] == "verifier_unavailable"
    assert (key.status_code, key.json()["error"]["message"]) == (
        401,
        "a portal API key is not a token for this agent: exchange it at POST "
        f'{PORTAL}/api/agents/token with {{"agent": "<this agent\'s name>"}}, and send the '
        "access_token it answers",
    )
