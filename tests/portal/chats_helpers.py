"""Calls of the portal's chats API in tests: an agent, a bearer, a post and a refusal."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts

from .conftest import make_account

Headers = dict[str, str]


def _bearer(db: Session, username: str) -> Headers:
    scope = make_account(db, username)
    return {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}


def _agent(client: TestClient, headers: Headers, name: str = "helper") -> str:
    made = client.post("/api/agents", headers=headers, json={"name": name})
    assert made.status_code == 201, made.text
    agent_id: str = made.json()["agent"]["id"]
    return agent_id


def _post(
    client: TestClient, headers: Headers, agent_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    answer = client.post(f"/api/agents/{agent_id}/conversations", headers=headers, json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _refusal(status: int, message: str, code: str) -> tuple[int, dict[str, Any]]:
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}
    return status, {
        "error": {
            "message": message,
            "type": kind.get(status, _type_of(status)),
            "param": None,
            "code": code,
        }
    }


def _type_of(status: int) -> str:
    from webagents.server.api_errors import error_type

    return error_type(status)
