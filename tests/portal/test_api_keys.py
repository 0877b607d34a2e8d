"""API keys (P1): made on the keys page (shown once, stored hashed), used as a bearer at
`GET /api/users/me`, revoked; another account's key answers 404; scopes only from auth."""

from __future__ import annotations

import re
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.accounts.repository import ApiKeys
from webagents.portal.db.tables import ApiKey
from webagents.portal.scope import AccountScope
from webagents.portal.tokens.credentials import digest

from .conftest import form_token, make_account, sign_in

_KEY = re.compile(r'<code id="new-key">(rok_[A-Za-z0-9_-]{43})</code>')


def _make_key(client: TestClient, name: str) -> str:
    answer = client.post("/keys", data={"csrf_token": form_token(client, "/keys"), "name": name})
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "no-store"
    found = _KEY.search(answer.text)
    assert found, answer.text
    return found.group(1)


def _revoke(client: TestClient, key_id: object) -> int:
    answer = client.post(f"/keys/{key_id}/revoke", data={"csrf_token": form_token(client, "/keys")})
    return answer.status_code


def _me(client: TestClient, key: str) -> tuple[int, object]:
    answer = client.get("/api/users/me", headers={"Authorization": f"Bearer {key}"})
    return answer.status_code, answer.json()


def test_p1_api_key_is_shown_once_stored_hashed_and_names_its_user(
    client: TestClient, db: Session
) -> None:
    scope = make_account(db)
    sign_in(client)
    key = _make_key(client, "laptop")
    row = db.scalars(select(ApiKey)).one()
    assert (row.user_id, row.name, row.prefix, row.key_hash, row.revoked_at) == (
        scope.user_id,
        "laptop",
        key[:10],
        digest(key),
        None,
    )
    later = client.get("/keys")
    assert key not in later.text and f"<code>{key[:10]}…</code>" in later.text

    status, body = _me(client, key)
    assert status == 200
    assert body == {
        "user": {
            "id": str(scope.user_id),
            "username": "alice",
            "created_at": body["user"]["created_at"],  # type: ignore[index]
        }
    }
    assert body["user"]["created_at"].endswith("Z")  # type: ignore[index]


def test_p1_a_revoked_api_key_is_refused(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client)
    key = _make_key(client, "old")
    kept = _make_key(client, "kept")
    assert _me(client, key)[0] == 200
    row = db.scalars(select(ApiKey).where(ApiKey.name == "old")).one()
    assert _revoke(client, row.id) == 303
    assert _me(client, key) == (
        401,
        {
            "error": {
                "message": "this API key is unknown or was revoked: make a new one on the portal",
                "type": "authentication_error",
                "param": None,
                "code": "unauthorized",
            }
        },
    )
    assert _me(client, kept)[0] == 200
    assert "revoked" in client.get("/keys").text


def test_p1_another_users_key_answers_404_and_stays_valid(
    client: TestClient, other_client: TestClient, db: Session
) -> None:
    make_account(db, "alice")
    make_account(db, "bob")
    sign_in(client, "alice")
    sign_in(other_client, "bob")
    alices = _make_key(client, "alice's")
    alice_key_id = db.scalars(select(ApiKey)).one().id

    for key_id in (alice_key_id, uuid.uuid4(), "not-a-uuid"):
        assert _revoke(other_client, key_id) == 404
    refused = other_client.post(
        f"/keys/{alice_key_id}/revoke", data={"csrf_token": form_token(other_client, "/keys")}
    )
    assert "you have no such API key: see your keys on the API keys page" in refused.text
    assert "alice" not in other_client.get("/keys").text.split("</nav>")[1]
    assert _me(client, alices)[0] == 200


@pytest.mark.parametrize(
    ("authorization", "message"),
    [
        (
            None,
            "send your API key as 'Authorization: Bearer rok_...' (make one on the portal's "
            "API keys page, or with webagents portal apikey)",
        ),
        (
            "Basic YWxpY2U6eA==",
            "send your API key as 'Authorization: Bearer rok_...' (make one on the portal's "
            "API keys page, or with webagents portal apikey)",
        ),
        (
            "Bearer eyJhbGciOiJub25lIn0.e30.",
            "this token was not issued by this portal for this use: run webagents login "
            "(unknown signing key)",
        ),
        (
            "Bearer not-a-token",
            "this token was not issued by this portal for this use: run webagents login "
            "(it is not a JWT)",
        ),
        (
            "Bearer rok_" + "A" * 43,
            "this API key is unknown or was revoked: make a new one on the portal",
        ),
    ],
)
def test_p1_api_refuses_anonymous_and_unknown_credentials_with_401(
    client: TestClient, db: Session, authorization: str | None, message: str
) -> None:
    make_account(db)
    sign_in(client)  # a browser session is no API credential
    headers = {"Authorization": authorization} if authorization else {}
    answer = client.get("/api/users/me", headers=headers)
    assert (answer.status_code, answer.headers["www-authenticate"]) == (401, "Bearer")
    assert answer.json() == {
        "error": {
            "message": message,
            "type": "authentication_error",
            "param": None,
            "code": "unauthorized",
        }
    }


def test_p1_scopes_are_made_only_from_a_verified_identity(db: Session) -> None:
    with pytest.raises(TypeError, match=r"made only by accounts\.auth"):
        AccountScope(uuid.uuid4(), "alice")
    with pytest.raises(TypeError, match="needs an AccountScope, not UUID"):
        ApiKeys(db, uuid.uuid4())  # type: ignore[arg-type]
