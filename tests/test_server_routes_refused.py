"""What `serve` and `daemon` answer to a method a route does not take and to a path they do not
serve (SPEC 6, issue 24): OpenAI's error shape, with `Allow` naming every method the path
takes (Starlette's own 405 named the first route's alone, as "Method Not Allowed" with no
`Allow`), and a 404 that names the path. The same through Portal Connect's relay is in
test_connect_relayed_routes.py; the portal's own in portal/test_connect_relayed_errors.py."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from webagents import Agent
from webagents.access import AccessVerifier
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.testing import ScriptedModel


def _client(*names: str) -> TestClient:
    served = [
        ServedAgent(Agent(name, "You help.", model=ScriptedModel(["hi"])), AccessVerifier(None))
        for name in names
    ]
    return TestClient(create_app(AgentHost(served)), raise_server_exceptions=False)


def _refusal(answer: Any) -> tuple[int, str | None, dict[str, Any]]:
    return answer.status_code, answer.headers.get("allow"), answer.json()


def _error(message: str, kind: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@pytest.mark.parametrize("agents", [("helper",), ("helper", "other")], ids=["serve", "daemon"])
@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("GET", "/agents/helper/chat/completions", "POST"),
        ("PUT", "/agents/helper/responses/resp_1", "DELETE, GET"),
        ("POST", "/v1/conversations/conv_1", "DELETE, GET"),
        ("PATCH", "/agents/helper/mcp", "DELETE, GET, HEAD, POST"),
        ("POST", "/health", "GET"),
    ],
)
def test_serve_a_method_a_path_does_not_take_is_405_with_allow_in_the_error_shape(
    agents: tuple[str, ...], method: str, path: str, allowed: str
) -> None:
    with _client(*agents) as client:
        answer = client.request(method, path)
    assert _refusal(answer) == (
        405,
        allowed,
        _error(
            f"{path} does not take {method}: send {allowed}",
            "invalid_request_error",
            "method_not_allowed",
        ),
    )


@pytest.mark.parametrize("path", ["/agents/helper/files", "/agents/helper/responses/r/x/y", "/v2"])
def test_serve_a_path_not_served_is_404_in_the_error_shape(path: str) -> None:
    with _client("helper", "other") as client:
        answer = client.get(path)
    assert _refusal(answer) == (
        404,
        None,
        _error(f"there is nothing at {path}", "not_found_error", "not_found"),
    )
