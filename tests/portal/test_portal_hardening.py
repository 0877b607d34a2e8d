"""Hardening of the portal's web side (issue 11, security review 3): security headers on
every page, no-store on every answer that carries a token or key, PATCH nulls refused with a
400 that says what to send, and the home page's title."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts

from .conftest import form_token, make_account, sign_in

PAGE_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options")


def _security(answer: Any) -> dict[str, str | None]:
    return {
        name: answer.headers.get(name)
        for name in (*PAGE_HEADERS, "referrer-policy", "cache-control", "pragma")
    }


def test_hardening_every_page_forbids_framing_sniffing_and_referrers(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    anonymous = [client.get("/signin"), client.get("/signup"), client.get("/nothing-here")]
    sign_in(client)
    signed_in = [
        client.get(path)
        for path in ("/", "/keys", "/device", "/cli/auth?port=8123&state=" + "s" * 32)
    ]
    redirect = client.post("/signout", data={"csrf_token": form_token(client, "/keys")})
    for answer in [*anonymous, *signed_in, redirect]:
        headers = _security(answer)
        csp = headers.pop("content-security-policy") or ""
        assert headers == {
            "x-frame-options": "DENY",
            "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer",
            "cache-control": None,
            "pragma": None,
        }, answer.request.url
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
        assert directives == {
            "default-src": "'none'",
            "style-src": "'self'",
            "img-src": "'self' data:",
            "base-uri": "'none'",
            "frame-ancestors": "'none'",
        }, answer.request.url
    assert [a.status_code for a in anonymous] == [200, 200, 404]
    assert [a.status_code for a in signed_in] == [200, 200, 200, 200]
    assert redirect.status_code == 303


def test_hardening_api_answers_are_nosniff_and_never_cached(
    client: TestClient, db: Session
) -> None:
    scope = make_account(db)
    key = accounts.create_key(db, scope, "cli").key
    bearer = {"Authorization": f"Bearer {key}"}
    answers = [
        client.get("/health"),
        client.get("/api/users/me", headers=bearer),
        client.get("/api/users/me"),  # a 401 too
    ]
    for answer in answers:
        assert _security(answer) == {
            "content-security-policy": None,
            "x-frame-options": None,
            "x-content-type-options": "nosniff",
            "referrer-policy": None,
            "cache-control": "no-store",
            "pragma": "no-cache",
        }, answer.request.url
    assert [a.status_code for a in answers] == [200, 200, 401]
    jwks = client.get("/.well-known/jwks.json")
    assert (jwks.headers["cache-control"], jwks.headers["x-content-type-options"]) == (
        "public, max-age=300",
        "nosniff",
    )


def _no_store(answer: Any) -> tuple[int, str | None, str | None]:
    return answer.status_code, answer.headers.get("cache-control"), answer.headers.get("pragma")


def test_hardening_every_answer_with_a_token_or_key_is_no_store(
    client: TestClient, db: Session
) -> None:
    """RFC 6749 5.1: a token answer says Cache-Control: no-store and Pragma: no-cache."""
    scope = make_account(db)
    bearer = {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}
    cli_token = client.post("/api/auth/cli/token", headers=bearer, json={})
    assert "access_token" in cli_token.json()
    assert _no_store(cli_token) == (200, "no-store", "no-cache")

    grant = client.post("/api/auth/device/code").json()
    sign_in(client)
    approved = client.post(
        "/device",
        data={
            "csrf_token": form_token(client, "/device"),
            "user_code": grant["user_code"],
            "decision": "approve",
        },
    )
    assert approved.status_code == 200
    device = client.post(
        "/api/auth/device/token",
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": grant["device_code"],
        },
    )
    assert "access_token" in device.json()
    assert _no_store(device) == (200, "no-store", "no-cache")

    agent = client.post(
        "/api/agents",
        headers=bearer,
        json={"name": "helper", "description": "", "instructions": "", "skills": []},
    )
    assert "rawApiKey" in agent.json()
    assert _no_store(agent) == (201, "no-store", "no-cache")
    agent_token = client.post("/api/agents/token", headers=bearer, json={"agent": "helper"})
    assert "access_token" in agent_token.json()
    assert _no_store(agent_token) == (200, "no-store", "no-cache")

    new_key = client.post(
        "/keys", data={"csrf_token": form_token(client, "/keys"), "name": "laptop"}
    )
    assert 'class="secret"' in new_key.text
    assert _no_store(new_key) == (200, "no-store", "no-cache")


@pytest.mark.parametrize(
    ("field", "what"),
    [
        ("name", "a name"),
        ("description", 'a string ("" for none)'),
        ("instructions", 'a string ("" for none)'),
        ("skills", "a list or a mapping ([] or {} for none)"),
    ],
)
def test_hardening_p4_patch_with_null_for_a_required_field_is_a_400_saying_what_to_send(
    client: TestClient, db: Session, field: str, what: str
) -> None:
    scope = make_account(db)
    bearer = {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}
    created = client.post(
        "/api/agents",
        headers=bearer,
        json={"name": "helper", "description": "d", "instructions": "i", "skills": ["memory"]},
    ).json()["agent"]
    answer = client.patch(f"/api/agents/{created['id']}", headers=bearer, json={field: None})
    assert (answer.status_code, answer.json()) == (
        400,
        {
            "error": {
                "message": f"{field} cannot be null: send {what}, or leave {field} out to keep "
                "it as it is",
                "type": "invalid_request_error",
                "param": None,
                "code": "null_field",
            }
        },
    )
    unchanged = client.get(f"/api/agents/{created['id']}", headers=bearer).json()["agent"]
    assert unchanged == created
    cleared = client.patch(f"/api/agents/{created['id']}", headers=bearer, json={"model": None})
    assert (cleared.status_code, cleared.json()["agent"]["model"]) == (200, None)


def test_hardening_the_home_pages_title_is_only_the_title(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client)
    page = client.get("/").text
    assert re.findall(r"<title>(.*?)</title>", page, re.S) == ["alice · webagents portal"]
    assert page.count("<h2>Your agents</h2>") == 1
