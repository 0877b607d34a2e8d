"""A1, A5, A6: the access block's verifiers, in process (the HTTP path is in tests/e2e)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from webagents import Caller
from webagents.access import AccessVerifier, Unauthorized
from webagents.agent_file import parse_spec
from webagents.agent_spec import AccessSpec, JwtIssuer
from webagents.errors import AgentFileError, ConfigError, ToolError
from webagents.testing import AppServer

from .memory_helpers import memory_agent, use


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


def _by_claims(jwks_url: str, *identity: str) -> AccessVerifier:
    """A verifier of the one issuer whose tokens name the caller by `identity`'s claims."""
    return AccessVerifier(
        AccessSpec(
            jwt=[
                JwtIssuer(
                    issuer="https://id.test",
                    jwks=jwks_url,
                    audience="helper",
                    identity=list(identity),
                )
            ]
        )
    )


async def test_a6_jwks_is_fetched_once_and_again_for_a_new_key(
    issuer: tuple[Issuer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = issuer
    verifier = _verifier(url)
    for _ in range(3):
        assert await verifier.caller(f"Bearer {state.token()}", {}) == Caller.verified(
            "s-1", issuer="https://id.test"
        )
    assert state.fetches == 1
    # The issuer rotates its key: an unknown kid refreshes the set (not more often than the
    # minimum interval, which this test shortens).
    monkeypatch.setattr("webagents.access.JWKS_MIN_REFRESH_SECONDS", 0.0)
    state.keys["k2"] = ec.generate_private_key(ec.SECP256R1())
    assert await verifier.caller(f"Bearer {state.token('k2', sub='s-2')}", {}) == Caller.verified(
        "s-2", issuer="https://id.test"
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
    verifier = _by_claims(url, "email", "upn")
    assert await verifier.caller(f"Bearer {state.token(upn='u@x')}", {}) == Caller.verified(
        "u@x", issuer="https://id.test"
    )
    assert await verifier.caller(
        f"Bearer {state.token(email='e@x', email_verified=True, upn='u@x')}", {}
    ) == Caller.verified("e@x", issuer="https://id.test")
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
    verifier = _by_claims(url, "email", "sub")
    unverified = state.token(email="ceo@example.com", email_verified=False)
    assert await verifier.caller(f"Bearer {unverified}", {}) == Caller.verified(
        "s-1", issuer="https://id.test"
    )
    verified = state.token(email="ceo@example.com", email_verified=True)
    assert await verifier.caller(f"Bearer {verified}", {}) == Caller.verified(
        "ceo@example.com", issuer="https://id.test"
    )
    await verifier.aclose()


@pytest.mark.parametrize("secret", ["anonymous", " padded ", "trailing\n"])
def test_a5_a_key_that_could_never_be_presented_is_refused(secret: str) -> None:
    with pytest.raises(ConfigError, match="could never be presented"):
        AccessVerifier(AccessSpec(owner="env:OWNER"), environ={"OWNER": secret})


def test_a2_identities_are_one_caller_however_their_letters_are_composed() -> None:
    assert Caller.verified("re\u0301my@example.com") == Caller.verified("r\u00e9my@example.com")
    assert Caller.channel("telegram", "e\u0301") == Caller.channel("telegram", "\u00e9")


@pytest.mark.parametrize(
    ("email_verified", "counts"),
    [
        (True, True),
        (False, False),
        ("false", False),
        ("true", False),
        (0, False),
        (1, False),
        (None, False),
        ("missing", False),
        ([], False),
        ({"value": True}, False),
    ],
)
async def test_a6_email_verified_must_be_json_true(
    issuer: tuple[Issuer, str], email_verified: Any, counts: bool
) -> None:
    """A6: an email claim names the caller only when `email_verified` is the JSON `true`;
    otherwise the next identity claim (here `sub`) does."""
    state, url = issuer
    verifier = _by_claims(url, "email", "sub")
    claims: dict[str, Any] = {"email": "ceo@example.com"}
    if email_verified != "missing":
        claims["email_verified"] = email_verified
    expected = "ceo@example.com" if counts else "s-1"
    assert await verifier.caller(f"Bearer {state.token(**claims)}", {}) == Caller.verified(
        expected, issuer="https://id.test"
    )
    await verifier.aclose()


async def test_a1_an_unverified_email_alone_names_no_one(
    issuer: tuple[Issuer, str],
) -> None:
    """A1: with no other identity claim, an unverified email is refused, not used."""
    state, url = issuer
    verifier = _by_claims(url, "email")
    with pytest.raises(Unauthorized) as caught:
        await verifier.caller(f"Bearer {state.token(email='ceo@example.com')}", {})
    assert str(caught.value) == (
        "the token names no identity (none of the claims email; an email counts only when "
        "the token's email_verified is true)"
    )
    await verifier.aclose()


def _two_issuers(jwks_url: str, *, plain: bool = False, **spec: Any) -> AccessVerifier:
    """Alice's API key, and two trusted issuers (both signing with the fixture's keys)."""
    return AccessVerifier(
        AccessSpec(
            keys={"alice@example.com": "env:ALICE"},
            jwt=[
                JwtIssuer(issuer="https://id.test", jwks=jwks_url, audience="helper"),
                JwtIssuer(
                    issuer="https://other.test",
                    jwks=jwks_url,
                    audience="helper",
                    plain_identity=plain,
                ),
            ],
            **spec,
        ),
        environ={"ALICE": "alice-key"},
    )


async def test_a6_a_jwt_identity_carries_its_issuer(issuer: tuple[Issuer, str]) -> None:
    """A6: a JWT caller's namespace names its issuer, so it never meets an API-key caller's."""
    state, url = issuer
    verifier = _two_issuers(url)
    by_key = await verifier.caller("Bearer alice-key", {})
    first = await verifier.caller(f"Bearer {state.token(sub='alice@example.com')}", {})
    second = await verifier.caller(
        f"Bearer {state.token(iss='https://other.test', sub='alice@example.com')}", {}
    )
    assert (by_key, first, second) == (
        Caller.verified("alice@example.com"),
        Caller.verified("alice@example.com", issuer="https://id.test"),
        Caller.verified("alice@example.com", issuer="https://other.test"),
    )
    assert [c.namespace for c in (by_key, first, second)] == [
        "caller:alice@example.com",
        "caller:jwt:https://id.test#alice@example.com",
        "caller:jwt:https://other.test#alice@example.com",
    ]
    assert first.describe() == "verified 'alice@example.com' from https://id.test"
    await verifier.aclose()


async def test_a6_plain_identity_maps_an_issuer_to_api_key_callers_on_purpose(
    issuer: tuple[Issuer, str],
) -> None:
    """A6: `plain_identity: true` makes an issuer's tokens name the API-key callers."""
    state, url = issuer
    verifier = _two_issuers(url, plain=True)
    plain = await verifier.caller(
        f"Bearer {state.token(iss='https://other.test', sub='alice@example.com')}", {}
    )
    scoped = await verifier.caller(f"Bearer {state.token(sub='alice@example.com')}", {})
    assert (plain, plain.namespace) == (
        Caller.verified("alice@example.com"),
        "caller:alice@example.com",
    )
    assert scoped.namespace == "caller:jwt:https://id.test#alice@example.com"
    # Even a plain issuer's token cannot name another issuer's caller, or a channel sender.
    for posing in ("jwt:https://id.test#alice@example.com", "channel:telegram:4242"):
        caller = await verifier.caller(
            f"Bearer {state.token(iss='https://other.test', sub=posing)}", {}
        )
        assert (caller, caller.namespace) == (Caller.verified(posing), None)
    await verifier.aclose()


async def test_a6_a_second_issuers_token_does_not_read_an_api_key_callers_notes(
    issuer: tuple[Issuer, str], tmp_path: Path
) -> None:
    """A6, M2 through the memory skill: same `sub` as an API-key identity, separate notes;
    with the issuer's `plain_identity: true`, the same notes."""
    state, url = issuer
    _agent, skill = memory_agent(tmp_path / "keeper")
    token = f"Bearer {state.token(iss='https://other.test', sub='alice@example.com')}"

    scoped = _two_issuers(url)
    alice = await scoped.caller("Bearer alice-key", {})
    await use(skill, alice, "memory_write", key="plan", content="Alice's plan: Lisbon.")
    stranger = await scoped.caller(token, {})
    assert await use(skill, stranger, "memory_list") == {"notes": []}
    assert await use(skill, stranger, "memory_search", query="Lisbon plan") == []
    with pytest.raises(ToolError) as caught:
        await use(skill, stranger, "memory_read", key="plan")
    assert str(caught.value) == "there is no note 'plan'; memory_list shows the keys"
    written = await use(skill, stranger, "memory_write", key="plan", content="Not Alice's.")
    assert written["namespace"] == "caller:jwt:https://other.test#alice@example.com"
    assert (await use(skill, alice, "memory_read", key="plan"))["content"] == (
        "Alice's plan: Lisbon."
    )
    folders = sorted(p.name for p in (tmp_path / "keeper/.webagents/memory/callers").iterdir())
    assert len(folders) == 2 and folders[0].startswith("alice-example-com-"), folders
    assert folders[1].startswith("jwt-https-other-test-alice-example-com-"), folders
    await scoped.aclose()

    plain = _two_issuers(url, plain=True)
    same_alice = await plain.caller(token, {})
    assert (await use(skill, same_alice, "memory_read", key="plan"))["content"] == (
        "Alice's plan: Lisbon."
    )
    await plain.aclose()


@pytest.mark.parametrize(
    ("identity", "kept_for"),
    [
        ("jwt:https://id.test#alice@example.com", "callers verified by a JWT issuer"),
        ("channel:telegram:4242", "channel senders"),
    ],
)
def test_a6_an_api_key_identity_cannot_take_a_reserved_prefix(
    identity: str, kept_for: str, tmp_path: Path
) -> None:
    """A6: no API key can be configured to name a JWT caller's or channel sender's namespace."""
    text = f"---\naccess:\n  keys:\n    {identity!r}: env:X\n---\nHi.\n"
    with pytest.raises(AgentFileError) as caught:
        parse_spec(text, tmp_path / "AGENT.md")
    prefix = identity.split(":")[0] + ":"
    assert str(caught.value) == (
        f"{tmp_path / 'AGENT.md'}:2: access.keys: the identity {identity!r} starts with "
        f"{prefix!r}, which is kept for {kept_for}: name the key's caller without it"
    )


@pytest.mark.parametrize(
    "name", ["https://id.test/#x", "https://id.test,evil", "https://id.test\n", ""]
)
def test_a6_an_issuer_that_cannot_name_namespaces_is_refused(name: str, tmp_path: Path) -> None:
    """A6: the issuer is part of its callers' namespaces (jwt:<issuer>#<identity>), so it
    holds no '#', comma or control character."""
    with pytest.raises(ValidationError) as caught:
        JwtIssuer(issuer=name, jwks="https://id.test/jwks", audience="helper")
    assert caught.value.errors()[0]["msg"] == (
        "Value error, the issuer names its callers' namespaces (jwt:<issuer>#<identity>): it "
        "must be non-empty, with no '#', comma or control character"
    )


def test_a6_an_issuer_listed_twice_is_refused() -> None:
    """A6: two entries for one issuer would leave open which one's settings apply."""
    entry = {"issuer": "https://id.test", "jwks": "https://id.test/jwks", "audience": "helper"}
    with pytest.raises(ValidationError) as caught:
        AccessSpec.model_validate({"jwt": [entry, {**entry, "plain_identity": True}]})
    assert caught.value.errors()[0]["msg"] == (
        "Value error, the issuer https://id.test is listed twice: give each issuer one entry"
    )


async def _expect_caller(
    authorization: str | None, headers: dict[str, str], expected: Caller | str
) -> None:
    """The caller a request with these headers is, or the refusal it gets (a str)."""
    verifier = AccessVerifier(
        AccessSpec(
            owner="env:OWNER",
            keys={"alice@example.com": "env:ALICE"},
            channels={"telegram": "env:T"},
        ),
        environ={"OWNER": "owner-key", "ALICE": "alice-key", "T": "bridge-key"},
    )
    if isinstance(expected, Caller):
        assert await verifier.caller(authorization, headers) == expected
    else:
        with pytest.raises(Unauthorized) as caught:
            await verifier.caller(authorization, headers)
        assert str(caught.value) == expected


SEND_ONE = "the Authorization and x-api-key headers present different credentials: send one of them"


@pytest.mark.parametrize(
    ("authorization", "headers", "expected"),
    [
        (None, {"x-api-key": "alice-key"}, Caller.verified("alice@example.com")),
        (None, {"x-api-key": "owner-key"}, Caller.owner()),
        (None, {"x-api-key": "anonymous"}, Caller.anonymous()),
        (None, {"x-api-key": ""}, Caller.anonymous()),
        (
            None,
            {"x-api-key": "bridge-key", "x-webagents-channel-sender": "42"},
            Caller.channel("telegram", "42"),
        ),
        ("Bearer alice-key", {"x-api-key": "alice-key"}, Caller.verified("alice@example.com")),
        ("Bearer anonymous", {"x-api-key": "anonymous"}, Caller.anonymous()),
        (None, {"x-api-key": "wrong"}, "the bearer token is not valid for this agent"),
        (
            None,
            {"x-api-key": "anonymous", "x-webagents-channel-sender": "42"},
            "a channel sender header needs its bridge's key",
        ),
        ("Bearer anonymous", {"x-api-key": "alice-key"}, SEND_ONE),
        ("Bearer alice-key", {"x-api-key": "anonymous"}, SEND_ONE),
        ("Bearer alice-key", {"x-api-key": "owner-key"}, SEND_ONE),
        ("Bearer owner-key", {"x-api-key": "wrong"}, SEND_ONE),
        ("Basic YWxpY2U6cHc=", {"x-api-key": "alice-key"}, SEND_ONE),
        ("", {"x-api-key": "alice-key"}, SEND_ONE),
    ],
)
async def test_a1_x_api_key_is_a_credential_verified_or_refused(
    authorization: str | None, headers: dict[str, str], expected: Caller | str
) -> None:
    """A1: `x-api-key` (as Anthropic-style clients send) is verified like a bearer key, and
    never ignored: with an Authorization header that says otherwise, the request is refused."""
    await _expect_caller(authorization, headers, expected)


def _send_one(first: str, second: str) -> str:
    return f"the {first} and {second} headers present different credentials: send one of them"


@pytest.mark.parametrize(
    ("authorization", "headers", "expected"),
    [
        (None, {"api-key": "alice-key"}, Caller.verified("alice@example.com")),
        (None, {"api-key": " owner-key "}, Caller.owner()),
        (None, {"api-key": "anonymous"}, Caller.anonymous()),
        (None, {"api-key": ""}, Caller.anonymous()),
        (
            None,
            {"api-key": "bridge-key", "x-webagents-channel-sender": "42"},
            Caller.channel("telegram", "42"),
        ),
        ("Bearer alice-key", {"api-key": "alice-key"}, Caller.verified("alice@example.com")),
        (
            None,
            {"x-api-key": "alice-key", "api-key": "alice-key"},
            Caller.verified("alice@example.com"),
        ),
        (
            "Bearer anonymous",
            {"x-api-key": "anonymous", "api-key": "anonymous"},
            Caller.anonymous(),
        ),
        (None, {"api-key": "wrong"}, "the bearer token is not valid for this agent"),
        (
            None,
            {"api-key": "anonymous", "x-webagents-channel-sender": "42"},
            "a channel sender header needs its bridge's key",
        ),
        ("Bearer anonymous", {"api-key": "alice-key"}, _send_one("Authorization", "api-key")),
        ("Bearer alice-key", {"api-key": "anonymous"}, _send_one("Authorization", "api-key")),
        ("Bearer owner-key", {"api-key": "wrong"}, _send_one("Authorization", "api-key")),
        ("Basic YWxpY2U6cHc=", {"api-key": "alice-key"}, _send_one("Authorization", "api-key")),
        ("", {"api-key": "alice-key"}, _send_one("Authorization", "api-key")),
        (
            None,
            {"x-api-key": "alice-key", "api-key": "owner-key"},
            _send_one("x-api-key", "api-key"),
        ),
        (
            None,
            {"x-api-key": "anonymous", "api-key": "alice-key"},
            _send_one("x-api-key", "api-key"),
        ),
        (
            "Bearer alice-key",
            {"x-api-key": "alice-key", "api-key": "wrong"},
            _send_one("Authorization", "api-key"),
        ),
        (
            "Bearer alice-key",
            {"x-api-key": "wrong", "api-key": "alice-key"},
            SEND_ONE,
        ),
    ],
)
async def test_a1_api_key_header_is_a_credential_verified_or_refused(
    authorization: str | None, headers: dict[str, str], expected: Caller | str
) -> None:
    """A1: `api-key: <key>` (as Azure OpenAI's clients send) is a credential exactly like
    `x-api-key`: verified or refused, never served as anonymous; `anonymous` is none; with
    an Authorization or x-api-key header that says otherwise, the request is refused."""
    await _expect_caller(authorization, headers, expected)


async def test_a1_api_key_header_carries_a_jwt_too(issuer: tuple[Issuer, str]) -> None:
    state, url = issuer
    verifier = _verifier(url)
    assert await verifier.caller(None, {"api-key": state.token()}) == Caller.verified(
        "s-1", issuer="https://id.test"
    )
    with pytest.raises(Unauthorized) as caught:
        await verifier.caller(None, {"api-key": state.token(aud="someone-else")})
    assert str(caught.value) == "the token is not meant for this agent (audience)"
    await verifier.aclose()


async def test_a1_x_api_key_carries_a_jwt_too(issuer: tuple[Issuer, str]) -> None:
    state, url = issuer
    verifier = _verifier(url)
    assert await verifier.caller(None, {"x-api-key": state.token()}) == Caller.verified(
        "s-1", issuer="https://id.test"
    )
    with pytest.raises(Unauthorized) as caught:
        await verifier.caller(None, {"x-api-key": state.token(aud="someone-else")})
    assert str(caught.value) == "the token is not meant for this agent (audience)"
    await verifier.aclose()
