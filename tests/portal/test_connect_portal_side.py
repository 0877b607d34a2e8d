"""Portal Connect (SPEC A4, P12) against real `webagents portal serve` processes on SQLite
and PostgreSQL, with a small agent that speaks the wire contract over a real WebSocket:
who is served and as whom, the refusals, the assertion's claims (verified with the JWKS),
streaming and not, cancel, a dropped agent, a restarted portal, two portal processes."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import openai
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from tests.openai_callers import caller

from .conftest import copy_of_template
from .connect_agent import WAIT, ConnectAgent, answer_text, connected
from .connect_world import HI, World, make_accounts, make_agents, make_world, remove_agents
from .processes import Served

pytestmark = pytest.mark.e2e  # runs the installed webagents command


@pytest.fixture(scope="module")
def portal(
    database_kind: str,
    migrated_template: str,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Served, str, dict[str, str]]]:
    """One portal for the file's tests that do not restart it (a start costs a process's
    import of the whole portal): its database, and alice's, bob's and carol's keys."""
    folder = tmp_path_factory.mktemp(f"connect-{database_kind}")
    database = copy_of_template(database_kind, migrated_template, folder, request)
    keys = make_accounts(database)
    served = Served(folder, "--database", database, "--access-log")
    try:
        yield served, database, keys
    finally:
        served.stop()


@pytest.fixture
def world(portal: tuple[Served, str, dict[str, str]]) -> Iterator[World]:
    """The test's agents, "helper" (alice's) and "other" (bob's), made anew on the shared
    portal and deleted at the end."""
    served, database, keys = portal
    made = make_agents(served.url, database, keys)
    yield made
    remove_agents(made)


@pytest.fixture
def agent(world: World) -> Iterator[ConnectAgent]:
    with connected(world.url, world.agent_key) as echoing:
        yield echoing


def _openai(world: World, username: str, name: str = "helper", url: str = "") -> openai.OpenAI:
    return caller(f"{url or world.url}/agents/{name}", world.keys[username], max_retries=0)


def _claims(world: World, token: str, agent_id: str) -> dict[str, Any]:
    keys = httpx.get(f"{world.url}/.well-known/jwks.json").json()["keys"]
    kid = jwt.get_unverified_header(token)["kid"]
    key = jwt.PyJWK(next(k for k in keys if k["kid"] == kid))
    claims: dict[str, Any] = jwt.decode(
        token, key, algorithms=["RS256"], audience=f"agent:{agent_id}", issuer=world.url
    )
    return claims


def _user_id(world: World, username: str) -> str:
    me = httpx.get(f"{world.url}/api/users/me", headers=world.headers(username))
    return str(me.json()["user"]["id"])


def test_p12_owner_served_through_the_portal_with_the_openai_client(
    world: World, agent: ConnectAgent
) -> None:
    assert agent.seen.hellos == [
        {
            "type": "hello",
            "agent_id": world.agent_id,
            "agent_name": "helper",
            "public_url": world.endpoint(),
            "connection_id": agent.seen.hellos[0]["connection_id"],
        }
    ]
    client = _openai(world, "alice")
    done = client.chat.completions.create(model="helper", messages=HI)  # type: ignore[arg-type]
    assert done.choices[0].message.content == "owner alice said: Hi there"
    streamed = client.chat.completions.create(
        model="helper",
        messages=HI,  # type: ignore[arg-type]
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed)
    assert text == "owner alice said: Hi there "
    bodies = [request["body"] for request in agent.seen.requests]
    assert bodies == [
        {"model": "helper", "messages": HI},
        {"model": "helper", "messages": HI, "stream": True},
    ]


def test_p12_reply_headers_and_status_pass_through(world: World, agent: ConnectAgent) -> None:
    answer = httpx.post(world.endpoint(), json={"messages": HI}, headers=world.headers("alice"))
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["x-webagents-caller"] == "relayed"
    assert answer.json()["choices"][0]["message"]["content"] == "owner alice said: Hi there"


def test_p12_assertion_claims_verified_with_the_jwks(world: World, agent: ConnectAgent) -> None:
    for _ in range(2):
        answer = httpx.post(world.endpoint(), json={"messages": HI}, headers=world.headers("alice"))
        assert answer.status_code == 200, answer.text
    first, second = (_claims(world, r["assertion"], world.agent_id) for r in agent.seen.requests)
    assert first["jti"] != second["jti"]
    assert first["exp"] - first["iat"] == 60
    assert {k: v for k, v in first.items() if k not in ("jti", "iat", "exp")} == {
        "iss": world.url,
        "aud": f"agent:{world.agent_id}",
        "sub": _user_id(world, "alice"),
        "username": "alice",
        "tier": "owner",
        "typ": "connect",
    }
    ids = [r["id"] for r in agent.seen.requests]
    assert len(set(ids)) == 2


def test_p12_assertion_is_not_a_bearer_token_of_the_portal(
    world: World, agent: ConnectAgent
) -> None:
    httpx.post(world.endpoint(), json={"messages": HI}, headers=world.headers("alice"))
    relayed = agent.seen.requests[0]["assertion"]
    answer = httpx.get(f"{world.url}/api/users/me", headers={"Authorization": f"Bearer {relayed}"})
    assert answer.status_code == 401


def test_p12_other_user_only_when_the_owner_allows(world: World, agent: ConnectAgent) -> None:
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _openai(world, "bob").chat.completions.create(model="helper", messages=HI)  # type: ignore[arg-type]
    assert refused.value.status_code == 403
    assert refused.value.body == {
        "message": "the owner of 'helper' has not allowed other users to call it: ask them "
        "to allow others on the agent's page in the portal",
        "type": "permission_error",
        "param": None,
        "code": "not_allowed",
    }
    assert agent.seen.requests == []
    # bob cannot change alice's agent: it is not his (404)
    patched = httpx.patch(
        f"{world.url}/api/agents/{world.agent_id}",
        json={"allowOthers": True},
        headers=world.headers("bob"),
    )
    assert patched.status_code == 404
    patched = httpx.patch(
        f"{world.url}/api/agents/{world.agent_id}",
        json={"allowOthers": True},
        headers=world.headers("alice"),
    )
    assert (patched.status_code, patched.json()["agent"]["allowOthers"]) == (200, True)
    done = _openai(world, "bob").chat.completions.create(model="helper", messages=HI)  # type: ignore[arg-type]
    assert done.choices[0].message.content == "user bob said: Hi there"
    claims = _claims(world, agent.seen.requests[0]["assertion"], world.agent_id)
    assert (claims["tier"], claims["username"], claims["sub"]) == (
        "user",
        "bob",
        _user_id(world, "bob"),
    )
    null = httpx.patch(
        f"{world.url}/api/agents/{world.agent_id}",
        json={"allowOthers": None},
        headers=world.headers("alice"),
    )
    assert null.status_code == 400


def test_p12_unknown_agent_404_offline_503_anonymous_401(world: World) -> None:
    unknown = httpx.post(
        world.endpoint("nobody"), json={"messages": HI}, headers=world.headers("alice")
    )
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
    offline = httpx.post(world.endpoint(), json={"messages": HI}, headers=world.headers("alice"))
    assert offline.status_code == 503
    assert offline.json() == {
        "error": {
            "message": "the agent 'helper' is not connected to the portal now: its owner must "
            "run `webagents serve` (or `webagents daemon`) in the agent's published folder",
            "type": "server_error",
            "param": None,
            "code": "agent_offline",
        }
    }
    anonymous = httpx.post(world.endpoint(), json={"messages": HI})
    assert anonymous.status_code == 401
    forged = httpx.post(
        world.endpoint(), json={"messages": HI}, headers={"Authorization": "Bearer rok_forged"}
    )
    assert forged.status_code == 401
    not_json = httpx.post(world.endpoint(), content=b"[1]", headers=world.headers("alice"))
    assert (not_json.status_code, not_json.json()["error"]["code"]) == (400, "invalid_request")


@pytest.mark.parametrize("key", ["rok_not_a_key", "", "user"])
def test_p12_bad_key_refused_at_ws(world: World, key: str) -> None:
    given = world.keys["alice"] if key == "user" else key
    headers = {"Authorization": f"Bearer {given}"} if given else {}

    async def connect() -> None:
        async with websockets.connect(
            world.url.replace("http", "ws") + "/ws", additional_headers=headers
        ):
            pass

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(connect())
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body or b"{}")["error"]["type"] == (
        "authentication_error"
    )


def test_p12_another_agents_key_cannot_receive_this_agents_requests(world: World) -> None:
    other = ConnectAgent(world.url, world.other_agent_key)
    try:
        other.wait_for("hellos")
        assert other.seen.hellos[0]["agent_name"] == "other"
        offline = httpx.post(
            world.endpoint(), json={"messages": HI}, headers=world.headers("alice")
        )
        assert offline.status_code == 503
        helper = ConnectAgent(world.url, world.agent_key)
        try:
            helper.wait_for("hellos")
            for _ in range(3):
                answer = httpx.post(
                    world.endpoint(), json={"messages": HI}, headers=world.headers("alice")
                )
                assert answer.status_code == 200
        finally:
            helper.stop()
        assert (len(helper.seen.requests), other.seen.requests) == (3, [])
    finally:
        other.stop()


def test_p12_requests_spread_over_the_agents_connections(world: World) -> None:
    first = ConnectAgent(world.url, world.agent_key)
    second = ConnectAgent(world.url, world.agent_key)
    try:
        first.wait_for("hellos")
        second.wait_for("hellos")
        for _ in range(4):
            answer = httpx.post(
                world.endpoint(), json={"messages": HI}, headers=world.headers("alice")
            )
            assert answer.status_code == 200
        assert (len(first.seen.requests), len(second.seen.requests)) == (2, 2)
    finally:
        first.stop()
        second.stop()


def test_p12_cancel_sent_when_the_caller_disconnects(world: World) -> None:
    hanging = ConnectAgent(world.url, world.agent_key, mode="hang")
    try:
        hanging.wait_for("hellos")
        body = {"messages": HI, "stream": True}
        with httpx.stream(
            "POST", world.endpoint(), json=body, headers=world.headers("alice"), timeout=WAIT
        ) as answer:
            assert answer.status_code == 200
            next(answer.iter_raw())  # the first chunk arrived; the caller goes away
        hanging.wait_for("cancels")
        assert hanging.seen.cancels == [hanging.seen.requests[0]["id"]]
    finally:
        hanging.stop()


def test_p12_agent_dropped_mid_reply_is_an_error_not_a_hang(world: World) -> None:
    dropping = ConnectAgent(world.url, world.agent_key, mode="drop")
    try:
        dropping.wait_for("hellos")
        whole = httpx.post(
            world.endpoint(), json={"messages": HI}, headers=world.headers("alice"), timeout=WAIT
        )
        assert (whole.status_code, whole.json()["error"]["code"]) == (502, "agent_disconnected")
        dropping.wait_for("hellos", 2)  # it reconnected
        streamed = httpx.post(
            world.endpoint(),
            json={"messages": HI, "stream": True},
            headers=world.headers("alice"),
            timeout=WAIT,
        )
        events = [e for e in streamed.text.split("\n\n") if e]
        assert streamed.status_code == 200
        assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == (
            "agent_disconnected"
        )
    finally:
        dropping.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_p12_portal_restarted_agent_reconnects(tmp_path: Path, fresh_database_url: str) -> None:
    port = str(_free_port())
    first = Served(tmp_path, "--database", fresh_database_url, "--port", port)
    try:
        world = make_world(first.url, fresh_database_url)
        agent = ConnectAgent(world.url, world.agent_key)
        agent.wait_for("hellos")
    finally:
        first.stop()
    second = Served(tmp_path, "--database", fresh_database_url, "--port", port)
    try:
        agent.wait_for("hellos", 2)
        answer = httpx.post(world.endpoint(), json={"messages": HI}, headers=world.headers("alice"))
        assert answer.json()["choices"][0]["message"]["content"] == "owner alice said: Hi there"
    finally:
        agent.stop()
        second.stop()


def test_p12_two_portal_processes_on_postgresql(
    tmp_path: Path, database_kind: str, world: World
) -> None:
    if database_kind != "postgresql":
        pytest.skip("several portal processes need PostgreSQL (SQLite: one process)")
    holder = ConnectAgent(world.url, world.agent_key)
    other = Served(tmp_path, "--database", world.database)
    try:
        holder.wait_for("hellos")
        elsewhere = f"{other.url}/agents/helper/chat/completions"
        client = _openai(world, "alice", url=other.url)
        done = client.chat.completions.create(model="helper", messages=HI)  # type: ignore[arg-type]
        assert done.choices[0].message.content == "owner alice said: Hi there"
        streamed = client.chat.completions.create(model="helper", messages=HI, stream=True)  # type: ignore[arg-type]
        assert "".join(c.choices[0].delta.content or "" for c in streamed) == (
            "owner alice said: Hi there "
        )
        large = [{"role": "user", "content": "x" * 20_000}]  # past NOTIFY's 8000 bytes
        answer = httpx.post(elsewhere, json={"messages": large}, headers=world.headers("alice"))
        assert answer.json()["choices"][0]["message"]["content"] == answer_text(
            holder.seen.requests[-1]
        )
        assert holder.seen.requests[-1]["body"] == {"messages": large}
        assert len(holder.seen.requests) == 3
    finally:
        holder.stop()
        other.stop()


def test_p12_two_processes_agent_dropped_and_cancelled(
    tmp_path: Path, database_kind: str, world: World
) -> None:
    if database_kind != "postgresql":
        pytest.skip("several portal processes need PostgreSQL (SQLite: one process)")
    other = Served(tmp_path, "--database", world.database)
    elsewhere = f"{other.url}/agents/helper/chat/completions"
    try:
        hanging = ConnectAgent(world.url, world.agent_key, mode="hang")
        try:
            hanging.wait_for("hellos")
            body = {"messages": HI, "stream": True}
            with httpx.stream(
                "POST", elsewhere, json=body, headers=world.headers("alice"), timeout=WAIT
            ) as answer:
                assert answer.status_code == 200
                next(answer.iter_raw())
            hanging.wait_for("cancels")
            assert hanging.seen.cancels == [hanging.seen.requests[0]["id"]]
        finally:
            hanging.stop()
        dropping = ConnectAgent(world.url, world.agent_key, mode="drop", reconnect=False)
        try:
            dropping.wait_for("hellos")
            whole = httpx.post(
                elsewhere, json={"messages": HI}, headers=world.headers("alice"), timeout=WAIT
            )
            assert (whole.status_code, whole.json()["error"]["code"]) == (
                502,
                "agent_disconnected",
            )
        finally:
            dropping.stop()
    finally:
        other.stop()
