"""The portal's public endpoint answers what it does not relay in its own shape (SPEC P12,
issue 24): a method a call's path does not take is a 405 with `Allow` and OpenAI's error body
(it was "Method Not Allowed" with no `Allow`), and any other path below an agent's name
(`/agents/<name>/mcp` among them: MCP is not relayed) a 404 in that shape that names the
paths there are (it was the HTML error page). Below an agent's id are the owner's pages:
an unknown one there is still the page."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from webagents.portal.connect.api import RELAYED

CALLS = ", ".join(dict.fromkeys(path for _, path in RELAYED))


def _error(message: str, kind: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "chat/completions", "POST"),
        ("GET", "responses", "POST"),
        ("PUT", "responses/resp_1", "DELETE, GET"),
        ("POST", "responses/resp_1/input_items", "GET"),
        ("PATCH", "conversations/conv_1", "DELETE, GET"),
        ("DELETE", "conversations", "POST"),
    ],
)
def test_p12_a_method_a_relayed_path_does_not_take_is_405_with_allow(
    client: TestClient, method: str, path: str, allowed: str
) -> None:
    answer = client.request(method, f"/agents/helper/{path}")
    assert (answer.status_code, answer.headers.get("allow"), answer.json()) == (
        405,
        allowed,
        _error(
            f"/agents/helper/{path} does not take {method}: send {allowed}",
            "invalid_request_error",
            "method_not_allowed",
        ),
    )
    assert answer.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "mcp"), ("GET", "mcp"), ("GET", "files"), ("PUT", "a/b/c")]
)
def test_p12_another_path_below_an_agents_name_is_404_in_the_error_shape(
    client: TestClient, method: str, path: str
) -> None:
    answer = client.request(method, f"/agents/helper/{path}")
    assert (answer.status_code, answer.json()) == (
        404,
        _error(
            f"there is nothing at /agents/helper/{path}: an agent's paths here are {CALLS}",
            "not_found_error",
            "not_found",
        ),
    )


def test_p12_an_unknown_path_below_an_agents_id_is_still_the_pages_404(
    client: TestClient,
) -> None:
    answer = client.get("/agents/0b7c8f9e-2f4b-4a8e-9a57-3f1e2d4c5b6a/nothing")
    assert (answer.status_code, answer.headers["content-type"]) == (
        404,
        "text/html; charset=utf-8",
    )
    assert "there is nothing here" in answer.text
