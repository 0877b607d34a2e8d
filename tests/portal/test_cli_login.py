"""The command line's sign-in on the portal (P3): /cli/auth approves a `webagents login` and
sends the browser to its callback with the state; the device grant (RFC 8628) with its
answers; logout revokes the token everywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.db.tables import DeviceCode

from .conftest import form_token, make_account, sign_in

STATE = "Zx8_state-0123456789"
GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def _me(client: TestClient, token: str) -> Any:
    return client.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})


def _decide_cli(client: TestClient, decision: str, port: str = "54321") -> Any:
    page = client.get(f"/cli/auth?port={port}&state={STATE}")
    assert page.status_code == 200, page.text
    assert "<strong>alice</strong>" in page.text
    return client.post(
        "/cli/auth",
        data={
            "csrf_token": form_token(client, f"/cli/auth?port={port}&state={STATE}"),
            "port": port,
            "state": STATE,
            "decision": decision,
        },
    )


def test_p3_approving_on_cli_auth_sends_the_token_to_the_callback(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    sign_in(client)
    answer = _decide_cli(client, "approve")
    assert answer.status_code == 303
    target = urlsplit(answer.headers["location"])
    assert (target.scheme, target.netloc, target.path) == ("http", "127.0.0.1:54321", "/callback")
    query = parse_qs(target.query)
    assert sorted(query) == ["state", "token", "username"]
    assert (query["state"], query["username"]) == ([STATE], ["alice"])
    me = _me(client, query["token"][0])
    assert (me.status_code, me.json()["user"]["username"]) == (200, "alice")


def test_p3_denying_on_cli_auth_sends_access_denied(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client)
    answer = _decide_cli(client, "deny")
    assert answer.headers["location"] == (
        f"http://127.0.0.1:54321/callback?error=access_denied&state={STATE}"
    )


def test_p3_cli_auth_refusals(client: TestClient, db: Session) -> None:
    anonymous = client.get(f"/cli/auth?port=54321&state={STATE}")
    assert anonymous.headers["location"] == (
        f"/signin?next=%2Fcli%2Fauth%3Fport%3D54321%26state%3D{STATE}"
    )
    make_account(db)
    sign_in(client)
    for query, message in [
        (f"port=80&state={STATE}", "the sign-in link has no valid port: run webagents login again"),
        ("port=54321&state=x", "the sign-in link has no valid state: run webagents login again"),
        (f"port=evil.example&state={STATE}", "the sign-in link has no valid port"),
    ]:
        answer = client.get(f"/cli/auth?{query}")
        assert answer.status_code == 400
        assert message in answer.text
    no_csrf = client.post(
        "/cli/auth", data={"port": "54321", "state": STATE, "decision": "approve"}
    )
    assert (no_csrf.status_code, "location" in no_csrf.headers) == (403, False)


def test_p3_logout_revokes_the_token_at_the_portal(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client)
    tokens = [
        parse_qs(urlsplit(_decide_cli(client, "approve").headers["location"]).query)["token"][0]
        for _ in range(2)
    ]
    out = client.post(
        "/api/auth/cli/logout", headers={"Authorization": f"Bearer {tokens[0]}"}, json={}
    )
    assert (out.status_code, out.json()) == (200, {"revoked": True})
    refused = _me(client, tokens[0])
    assert (refused.status_code, refused.json()["error"]) == (
        401,
        {
            "message": "this sign-in was ended (webagents logout, or its API key was revoked): "
            "run webagents login",
            "type": "authentication_error",
            "param": None,
            "code": "token_revoked",
        },
    )
    assert _me(client, tokens[1]).status_code == 200


def _poll(client: TestClient, device_code: str) -> Any:
    return client.post(
        "/api/auth/device/token", data={"grant_type": GRANT, "device_code": device_code}
    )


def _device_decision(client: TestClient, user_code: str, decision: str) -> Any:
    return client.post(
        "/device",
        data={
            "csrf_token": form_token(client, "/device"),
            "user_code": user_code,
            "decision": decision,
        },
    )


def test_p3_device_grant_pending_slow_down_approved_then_replay_refused(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    started = client.post("/api/auth/device/code")
    assert started.status_code == 200
    grant = started.json()
    user_code = grant["user_code"]
    assert grant == {
        "device_code": grant["device_code"],
        "user_code": user_code,
        "verification_uri": "http://testserver/device",
        "verification_uri_complete": f"http://testserver/device?user_code={user_code}",
        "expires_in": 600,
        "interval": 5,
    }
    pending = _poll(client, grant["device_code"])
    assert (pending.status_code, pending.json()["error"]) == (400, "authorization_pending")
    assert _poll(client, grant["device_code"]).json()["error"] == "slow_down"

    sign_in(client)
    page = client.get(f"/device?user_code={user_code}")
    assert f'value="{user_code}"' in page.text
    approved = _device_decision(client, user_code.lower().replace("-", ""), "approve")
    assert '<p id="result">Approved: the device is signed in as alice.' in approved.text

    done = _poll(client, grant["device_code"])
    assert done.status_code == 200
    body = done.json()
    assert body == {
        "access_token": body["access_token"],
        "token_type": "Bearer",
        "expires_in": 86400,
        "username": "alice",
        "user_id": body["user_id"],
    }
    assert _me(client, body["access_token"]).status_code == 200
    replay = _poll(client, grant["device_code"])
    assert (replay.status_code, replay.json()) == (
        400,
        {"error": "invalid_grant", "error_description": "this device code was used already"},
    )
    again = _device_decision(client, user_code, "approve")
    assert again.status_code == 400


def test_p3_device_grant_denied_expired_and_unknown(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client)
    denied = client.post("/api/auth/device/code").json()
    assert "Denied" in _device_decision(client, denied["user_code"], "deny").text
    assert _poll(client, denied["device_code"]).json()["error"] == "access_denied"

    expired = client.post("/api/auth/device/code").json()
    row = db.scalars(select(DeviceCode).where(DeviceCode.user_code == expired["user_code"])).one()
    row.expires_at = datetime.now(UTC) - timedelta(seconds=1)
    db.flush()
    assert _poll(client, expired["device_code"]).json()["error"] == "expired_token"
    late = _device_decision(client, expired["user_code"], "approve")
    assert late.status_code == 400
    assert "no device is waiting with this code" in late.text

    assert _poll(client, "made-up").json()["error"] == "invalid_grant"
    wrong_grant = client.post(
        "/api/auth/device/token", data={"grant_type": "password", "device_code": "x"}
    )
    assert wrong_grant.json()["error"] == "unsupported_grant_type"
    no_csrf = client.post("/device", data={"user_code": "BCDF-GHJK", "decision": "approve"})
    assert no_csrf.status_code == 403


def test_p3_anonymous_gets_the_sign_in_page_or_401(client: TestClient) -> None:
    page = client.get("/device?user_code=BCDF-GHJK")
    assert (page.status_code, page.headers["location"]) == (
        303,
        "/signin?next=%2Fdevice%3Fuser_code%3DBCDF-GHJK",
    )
    for path in ("/api/auth/cli/logout", "/api/agents/token"):
        answer = client.post(path, json={"agent": "helper"})
        assert (answer.status_code, answer.json()["error"]["type"]) == (
            401,
            "authentication_error",
        ), path
