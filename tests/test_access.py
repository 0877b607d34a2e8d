"""A1, A5, A6: the access block's verifiers, in process (the HTTP path is in tests/e2e)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from webagents import Caller
from webagents.access import AccessVerifier, Unauthorized
from webagents.agent_file import AccessSpec, JwtIssuer
from webagents.errors import ConfigError
from webagents.testing import AppServer


class Issuer:
    """An ES256 issuer whose JWKS is served for real and counts how often it is fetched."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {"k1": ec.generate_private_key(ec.SECP256R1())}
        self.fetches = 0

    def jwks(self) -> dict[str, Any]:
        published = []
        for kid, key in self.keys.items():
            jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
            published.append({**jwk, "kid": kid, "alg": "ES256", "use": "sig"})
        return {"keys": published}

    def token(self, kid: str = "k1", **claims: Any) -> str:
        body = {
            "iss": "https://id.test",
            "aud": "helper",
            "exp": int(time.time()) + 60,
            "sub": "s-1",
            **claims,
        }
        return jwt.encode(body, self.keys[kid], algorithm="ES256", headers={"kid": kid})


@pytest.fixture
def issuer() -> Iterator[tuple[Issuer, str]]:
    state = Issuer()

    async def jwks(request: Request) -> JSONResponse:
        state.fetches += 1
        return JSONResponse(state.jwks())

    with AppServer(Starlette(routes=[Route("/jwks", jwks)])) as server:
        yield state, f"{server.url}/jwks"


def _verifier(jwks_url: str, **spec: Any) -> AccessVerifier:
    return AccessVerifier(
        AccessSpec(
            jwt=[JwtIssuer(issuer="https://id.test", jwks=jwks_url, audience="helper")], **spec
        ),
        environ={"OWNER": "owner-key"},
    )


async def test_a6_jwks_is_fetched_once_and_again_for_a_new_key(
    issuer: tuple[Issuer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = issuer
    verifier = _verifier(url)
    for _ in range(3):
        assert await verifier.caller(f"Bearer {state.token()}", {}) == Caller.verified("s-1")
    assert state.fetches == 1
    # The issuer rotates its key: an unknown kid refreshes the set (not more often than the
    # minimum interval, which this test shortens).
    monkeypatch.setattr("webagents.access.JWKS_MIN_REFRESH_SECONDS", 0.0)
    state.keys["k2"] = ec.generate_private_key(ec.SECP256R1())
    assert await verifier.caller(f"Bearer {state.token('k2', sub='s-2')}", {}) == Caller.verified(
        "s-2"
    )
    assert state.fetches == 2
    await verifier.aclose()


async def test_a1_made_up_key_ids_do_not_flood_the_issuer(issuer: tuple[Issuer, str]) -> None:
    state, url = issuer
    verifier = _verifier(url)
    await verifier.caller(f"Bearer {state.token()}", {})
    state.keys["k9"] = ec.generate_private_key(ec.SECP256R1())
    for _ in range(5):
        with pytest.raises(Unauthorized, match="signing key is not among the issuer's keys"):
            await verifier.caller(f"Bearer {state.token('k9')}", {})
    assert state.fetches == 1  # within the refresh interval, nothing more is fetched
    await verifier.aclose()


async def test_a6_the_first_identity_claim_present_wins_and_none_is_refused(
    issuer: tuple[Issuer, str],
) -> None:
    state, url = issuer
    verifier = AccessVerifier(
        AccessSpec(
            jwt=[
                JwtIssuer(
                    issuer="https://id.test", jwks=url, audience="helper", identity=["email", "upn"]
                )
            ]
        )
    )
    assert await verifier.caller(f"Bearer {state.token(upn='u@x')}", {}) == Caller.verified("u@x")
    assert await verifier.caller(
        f"Bearer {state.token(email='e@x', upn='u@x')}", {}
    ) == Caller.verified("e@x")
    with pytest.raises(Unauthorized, match=r"names no identity \(none of the claims email, upn\)"):
        await verifier.caller(f"Bearer {state.token(email='')}", {})
    await verifier.aclose()


async def test_a1_an_unreachable_jwks_refuses_rather_than_admits() -> None:
    verifier = _verifier("http://127.0.0.1:9/jwks")
    token = Issuer().token()
    with pytest.raises(Unauthorized, match="signing key is not among the issuer's keys"):
        await verifier.caller(f"Bearer {token}", {})
    await verifier.aclose()


def test_a6_a_jwks_must_be_https_unless_on_this_machine() -> None:
    with pytest.raises(ConfigError, match="must be an https:// URL"):
        _verifier("http://id.example.com/jwks")
    assert _verifier("https://id.example.com/jwks").configured


def test_a5_the_same_key_cannot_name_two_callers() -> None:
    digest = hashlib.sha256(b"owner-key").hexdigest()
    with pytest.raises(ConfigError, match="the same key is given twice"):
        AccessVerifier(
            AccessSpec(owner="env:OWNER", keys={"alice@example.com": f"sha256:{digest}"}),
            environ={"OWNER": "owner-key"},
        )


async def test_a1_no_verifiers_means_every_credential_fails() -> None:
    verifier = AccessVerifier(None)
    assert not verifier.configured
    assert await verifier.caller(None, {}) == Caller.anonymous()
    assert await verifier.caller("Bearer anonymous", {}) == Caller.anonymous()
    assert await verifier.caller("Bearer ", {}) == Caller.anonymous()
    says = (
        "this agent verifies no one (its AGENT.md has no access: block): call it with no "
        'Authorization header, or with api_key "anonymous"'
    )
    for credential in ("Bearer anything", "Bearer a.b.c", "Bearer sk-a-real-openai-key"):
        with pytest.raises(Unauthorized) as caught:
            await verifier.caller(credential, {})
        assert str(caught.value) == says


def test_describe_names_what_is_verified_without_secrets() -> None:
    verifier = AccessVerifier(
        AccessSpec(
            owner="env:OWNER", keys={"a@x": "env:A", "b@x": "env:B"}, channels={"telegram": "env:T"}
        ),
        environ={"OWNER": "o", "A": "a", "B": "b", "T": "t"},
    )
    assert verifier.describe() == "the owner key, 2 API keys, channel bridges (telegram)"


async def test_a1_a_token_whose_algorithm_does_not_fit_its_key_is_refused(
    issuer: tuple[Issuer, str],
) -> None:
    _state, url = issuer
    from cryptography.hazmat.primitives.asymmetric import rsa

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    body = {"iss": "https://id.test", "aud": "helper", "exp": int(time.time()) + 60, "sub": "x"}
    token = jwt.encode(body, rsa_key, algorithm="RS256", headers={"kid": "k1"})  # k1 is EC
    verifier = _verifier(url)
    with pytest.raises(Unauthorized, match="does not match its signing key"):
        await verifier.caller(f"Bearer {token}", {})
    await verifier.aclose()


async def test_a6_an_unverified_email_names_no_one(issuer: tuple[Issuer, str]) -> None:
    state, url = issuer
    verifier = AccessVerifier(
        AccessSpec(
            jwt=[
                JwtIssuer(
                    issuer="https://id.test", jwks=url, audience="helper", identity=["email", "sub"]
                )
            ]
        )
    )
    unverified = state.token(email="ceo@example.com", email_verified=False)
    assert await verifier.caller(f"Bearer {unverified}", {}) == Caller.verified("s-1")
    verified = state.token(email="ceo@example.com", email_verified=True)
    assert await verifier.caller(f"Bearer {verified}", {}) == Caller.verified("ceo@example.com")
    await verifier.aclose()


@pytest.mark.parametrize("secret", ["anonymous", " padded ", "trailing\n"])
def test_a5_a_key_that_could_never_be_presented_is_refused(secret: str) -> None:
    with pytest.raises(ConfigError, match="could never be presented"):
        AccessVerifier(AccessSpec(owner="env:OWNER"), environ={"OWNER": secret})


def test_a2_identities_are_one_caller_however_their_letters_are_composed() -> None:
    assert Caller.verified("re\u0301my@example.com") == Caller.verified("r\u00e9my@example.com")
    assert Caller.channel("telegram", "e\u0301") == Caller.channel("telegram", "\u00e9")
