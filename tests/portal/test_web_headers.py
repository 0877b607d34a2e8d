"""The portal's security headers (web.py): every page forbids framing, sniffing and
referrers with the one inline style its policy allows; API answers are nosniff and never
cached; every answer that carries a token or key is no-store (P2)."""

from __future__ import annotations

from typing import Any

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


def test_web_every_page_forbids_framing_sniffing_and_referrers(
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


def test_web_api_answers_are_nosniff_and_never_cached(client: TestClient, db: Session) -> None:
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


def test_p2_every_answer_with_a_token_or_key_is_no_store(client: TestClient, db: Session) -> None:
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
