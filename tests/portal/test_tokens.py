"""Access tokens (P2): RS256 JWTs with `kid`, published keys at /.well-known/jwks.json, an
API key exchanged at POST /api/auth/cli/token, and key rotation that breaks no valid token.
Every forged or misdirected token is a 401; a token dies with the API key it was given for;
agent tokens live 15 minutes, portal tokens 24 hours."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.accounts.auth import administrator_scope
from webagents.portal.db.tables import SigningKey
from webagents.portal.settings import PortalSettings
from webagents.portal.tokens import service as tokens

from .conftest import make_account

REVOKED = {
    "message": "this sign-in was ended (webagents logout, or its API key was revoked): "
    "run webagents login",
    "type": "authentication_error",
    "param": None,
    "code": "token_revoked",
}
ISSUER = "http://testserver"


def _key(db: Session, username: str = "alice") -> str:
    scope = make_account(db, username)
    return accounts.create_key(db, scope, "cli").key


def _user_id(db: Session, username: str = "alice") -> str:
    return str(administrator_scope(db, username).user_id)


def _exchange(client: TestClient, key: str) -> Any:
    answer = client.post("/api/auth/cli/token", headers={"Authorization": f"Bearer {key}"}, json={})
    return answer


def _token(client: TestClient, key: str) -> str:
    """The access token `key` is exchanged for."""
    answer = _exchange(client, key)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _me(client: TestClient, token: str) -> Any:
    return client.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})


def _jwks(client: TestClient) -> dict[str, dict[str, str]]:
    answer = client.get("/.well-known/jwks.json")
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "public, max-age=300"
    return {key["kid"]: key for key in answer.json()["keys"]}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _refusal(message: str, code: str = "unauthorized") -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "authentication_error",
            "param": None,
            "code": code,
        }
    }


REFUSED = "this token was not issued by this portal for this use: run webagents login"


def test_p2_an_api_key_is_exchanged_for_a_token_that_verifies_against_the_jwks(
    client: TestClient, db: Session
) -> None:
    key = _key(db)
    answer = _exchange(client, key)
    assert answer.status_code == 200
    body = answer.json()
    user_id = _user_id(db)
    assert body == {"access_token": body["access_token"], "username": "alice", "user_id": user_id}
    token = body["access_token"]

    header = jwt.get_unverified_header(token)
    published = _jwks(client)
    assert header == {"alg": "RS256", "kid": header["kid"], "typ": "JWT"}
    assert list(published) == [header["kid"]]
    assert sorted(published[header["kid"]]) == ["alg", "e", "kid", "kty", "n", "use"]
    claims = jwt.decode(
        token,
        jwt.PyJWK(published[header["kid"]]),
        algorithms=["RS256"],
        audience="webagents-portal",
        issuer=ISSUER,
    )
    assert claims == {
        "iss": ISSUER,
        "sub": user_id,
        "username": "alice",
        "aud": "webagents-portal",
        "iat": claims["iat"],
        "exp": claims["iat"] + 24 * 3600,
        "jti": claims["jti"],
    }
    me = _me(client, token)
    assert (me.status_code, me.json()["user"]["id"]) == (200, user_id)


def test_p2_the_exchange_takes_only_a_valid_api_key(client: TestClient, db: Session) -> None:
    key = _key(db)
    token = _exchange(client, key).json()["access_token"]
    no_key = client.post("/api/auth/cli/token", json={})
    assert no_key.status_code == 401
    with_token = _exchange(client, token)
    assert (with_token.status_code, with_token.json()) == (
        401,
        _refusal("this credential is not a portal API key (rok_...)"),
    )
    scope = accounts.add_user(db, "bob", "correct horse battery staple")
    revoked = accounts.create_key(db, scope, "old")
    accounts.revoke_key(db, scope, str(revoked.api_key.id))
    after = _exchange(client, revoked.key)
    assert (after.status_code, after.json()) == (
        401,
        _refusal("this API key is unknown or was revoked: make a new one on the portal"),
    )


def _forge(claims: dict[str, Any], header: dict[str, Any], sign: Any) -> str:
    head = _b64(json.dumps(header).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(sign(f'{head}.{body}'.encode()))}"


def test_p2_forged_expired_and_misdirected_tokens_are_refused(
    client: TestClient, db: Session, settings: PortalSettings
) -> None:
    key = _key(db)
    good = _exchange(client, key).json()["access_token"]
    claims = jwt.decode(good, options={"verify_signature": False})
    signing = db.scalars(select(SigningKey)).one()
    kid = signing.kid
    public_pem = (
        serialization.load_pem_private_key(signing.private_pem.encode(), password=None)
        .public_key()
        .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(datetime.now(UTC).timestamp())

    def real(payload: dict[str, Any]) -> str:
        return jwt.encode(payload, signing.private_pem, algorithm="RS256", headers={"kid": kid})

    cases = [
        (
            "a stranger's key under our kid",
            jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": kid}),
            _refusal(f"{REFUSED} (Signature verification failed)"),
        ),
        (
            "a stranger's key under its own kid",
            jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": "stranger"}),
            _refusal(f"{REFUSED} (unknown signing key)"),
        ),
        (
            "alg none",
            _forge(claims, {"alg": "none", "typ": "JWT", "kid": kid}, lambda _: b""),
            _refusal(f"{REFUSED} (The specified alg value is not allowed)"),
        ),
        (
            "HS256 with the public key as the secret",
            _forge(
                claims,
                {"alg": "HS256", "typ": "JWT", "kid": kid},
                lambda data: hmac.new(public_pem, data, hashlib.sha256).digest(),
            ),
            _refusal(f"{REFUSED} (The specified alg value is not allowed)"),
        ),
        (
            "expired",
            real({**claims, "iat": now - 7200, "exp": now - 3600}),
            _refusal("your sign-in expired: run webagents login", "token_expired"),
        ),
        (
            "for an agent, not the portal",
            real({**claims, "aud": "agent:3f2a"}),
            _refusal(f"{REFUSED} (Audience doesn't match)"),
        ),
        (
            "from another issuer",
            real({**claims, "iss": "https://elsewhere.example"}),
            _refusal(f"{REFUSED} (Invalid issuer)"),
        ),
        (
            "without an expiry",
            real({k: v for k, v in claims.items() if k != "exp"}),
            _refusal(f'{REFUSED} (Token is missing the "exp" claim)'),
        ),
    ]
    assert _me(client, good).status_code == 200
    for name, token, expected in cases:
        answer = _me(client, token)
        assert (answer.status_code, answer.json()) == (401, expected), name


def test_p2_rotation_keeps_old_tokens_valid_and_new_tokens_carry_the_new_kid(
    client: TestClient, db: Session, settings: PortalSettings
) -> None:
    key = _key(db)
    before = _exchange(client, key).json()["access_token"]
    old_kid = jwt.get_unverified_header(before)["kid"]

    new = tokens.rotate(db, settings, timedelta(0))
    after = _exchange(client, key).json()["access_token"]
    assert jwt.get_unverified_header(after)["kid"] == new.kid != old_kid
    assert sorted(_jwks(client)) == sorted([old_kid, new.kid])
    assert _me(client, before).status_code == 200
    assert _me(client, after).status_code == 200

    # Once the old key's last token has expired, it is no longer published or accepted,
    # and the next rotation deletes it.
    old = db.get_one(SigningKey, old_kid)
    old.activates_at = datetime.now(UTC) - settings.token_lifetime - timedelta(hours=2)
    new.activates_at = datetime.now(UTC) - settings.token_lifetime - timedelta(seconds=1)
    db.flush()
    assert list(_jwks(client)) == [new.kid]
    refused = _me(client, before)
    assert (refused.status_code, refused.json()) == (
        401,
        _refusal(f"{REFUSED} (unknown signing key)"),
    )
    newest = tokens.rotate(db, settings, None)
    assert sorted(k.kid for k in db.scalars(select(SigningKey))) == sorted([new.kid, newest.kid])


def test_p2_a_rotated_in_key_is_published_before_it_signs(
    client: TestClient, db: Session, settings: PortalSettings
) -> None:
    key = _key(db)
    old_kid = jwt.get_unverified_header(_exchange(client, key).json()["access_token"])["kid"]
    new = tokens.rotate(db, settings, None)
    assert new.activates_at - new.created_at == timedelta(minutes=10)
    assert sorted(_jwks(client)) == sorted([old_kid, new.kid])
    still = _exchange(client, key).json()["access_token"]
    assert jwt.get_unverified_header(still)["kid"] == old_kid


def test_p2_private_keys_are_never_published(client: TestClient, db: Session) -> None:
    _exchange(client, _key(db))
    for published in _jwks(client).values():
        assert set(published) == {"kty", "n", "e", "kid", "alg", "use"}
    stored = db.scalars(select(SigningKey)).one()
    assert stored.private_pem.startswith("-----BEGIN PRIVATE KEY-----")


def test_p2_revoking_an_api_key_revokes_the_tokens_given_for_it(
    client: TestClient, db: Session
) -> None:
    alice = make_account(db, "alice")
    revoked_key = accounts.create_key(db, alice, "laptop")
    kept_key = accounts.create_key(db, alice, "ci")
    doomed, kept = _token(client, revoked_key.key), _token(client, kept_key.key)
    client.post("/api/agents", headers={"Authorization": f"Bearer {kept}"}, json={"name": "helper"})

    def me(token: str) -> tuple[int, Any]:
        answer = client.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})
        return answer.status_code, answer.json().get("error")

    assert (me(doomed)[0], me(kept)[0]) == (200, 200)
    accounts.revoke_key(db, alice, str(revoked_key.api_key.id))
    db.commit()  # as the keys page would: the refusals below roll back what is not committed
    assert me(doomed) == (401, REVOKED)
    minted = client.post(
        "/api/agents/token", headers={"Authorization": f"Bearer {doomed}"}, json={"agent": "x"}
    )
    assert (minted.status_code, minted.json()["error"]) == (401, REVOKED), minted.text
    assert me(kept) == (200, None)  # the other key's token lives on


def test_p2_agent_tokens_live_15_minutes_portal_tokens_24_hours(
    client: TestClient, db: Session
) -> None:
    alice = make_account(db, "alice")
    portal_token = _token(client, accounts.create_key(db, alice, "cli").key)
    bearer = {"Authorization": f"Bearer {portal_token}"}
    made = client.post("/api/agents", headers=bearer, json={"name": "helper"})
    assert made.status_code == 201, made.text
    answer = client.post("/api/agents/token", headers=bearer, json={"agent": "helper"})
    assert answer.status_code == 200, answer.text
    claims = jwt.decode(answer.json()["access_token"], options={"verify_signature": False})
    portal_claims = jwt.decode(portal_token, options={"verify_signature": False})
    assert (
        answer.json()["expires_in"],
        claims["exp"] - claims["iat"],
        portal_claims["exp"] - portal_claims["iat"],
    ) == (900, 900, 86400)
