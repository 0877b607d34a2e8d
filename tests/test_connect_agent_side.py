"""Portal Connect, the agent's side (SPEC A4, P12), against a fake portal on loopback
(tests/connect_portal.py): a published agent's server connects with its key, answers relayed
requests through its own app as the caller the portal's assertion names, refuses every relay
whose assertion does not verify (and an assertion over HTTP), stops a run the portal cancels,
reconnects with backoff, and says a refused key once."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from tests.conftest import write_agent
from tests.connect_portal import FakePortal, Reply, new_key
from webagents.caller import Caller
from webagents.cli import main
from webagents.home import agent_key_file
from webagents.portal_link import connect as connect_module
from webagents.portal_link.connect import Connector, backoff
from webagents.server import create_app
from webagents.server.daemon import FolderHost
from webagents.skills.auth import AuthSkill

from .connect_agent_side_helpers import FRIDAY, KEY, Served, _connected, _model, served_agent


def _error(reply: Reply) -> tuple[int, str]:
    assert reply.headers["content-type"] == "application/json", reply
    return reply.status, reply.json()["error"]["message"]


async def test_p12_a_relayed_request_is_served_as_the_portal_user_or_the_owner(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "webagents.connect")
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        bob = await portal.relay(FRIDAY, portal.assertion(username="bob"))
        owner_body = {**FRIDAY, "messages": [{"role": "user", "content": "remember that x"}]}
        owner = await portal.relay(owner_body, portal.assertion(tier="owner", username="alice"))
        stream = await portal.relay(
            {**FRIDAY, "stream": True, "metadata": {"session_id": "s1"}},
            portal.assertion(username="carol", channel="web"),
        )
        notes = agent.notes()
    assert (bob.status, bob.error, bob.json()["object"]) == (200, None, "chat.completion")
    assert bob.headers["content-type"] == "application/json"
    assert (owner.status, owner.error) == (200, None)
    assert (stream.status, stream.headers["content-type"]) == (
        200,
        "text/event-stream; charset=utf-8",
    )
    events = [e for e in stream.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    assert stream.headers["x-webagents-session"].startswith("kept"), stream.headers
    assert sorted(notes) == ["caller:bob", "caller:carol", "owner"]
    assert ["it is Friday" in n for n in notes["caller:bob"]] == [True]
    assert ["x" in n for n in notes["owner"]] == [True]
    said = [r.getMessage() for r in caplog.records if r.name == "webagents.connect"]
    assert said == [
        f"agent 'helper': connected to the portal {portal.url} (Portal Connect): callers reach "
        f"it at {portal.url}/agents/helper/chat/completions"
    ]


async def test_p12_the_portals_keys_are_fetched_on_connecting_not_by_the_first_relay(
    tmp_path: Path,
) -> None:
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        await _until(lambda: portal.jwks_fetches == 1)
        answers = [(await portal.relay(FRIDAY, portal.assertion())).status for _ in range(3)]
    assert (answers, portal.jwks_fetches) == ([200, 200, 200], 1)


async def test_a4_forged_relays_are_refused_with_401_and_never_served(tmp_path: Path) -> None:
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        replayed = portal.assertion()
        assert (await portal.relay(FRIDAY, replayed)).status == 200
        cases = {
            "another key": portal.assertion(key=new_key()),
            "another kid": portal.assertion(key=new_key(), kid="other"),
            "another agent": portal.assertion(aud=f"agent:{uuid.uuid4()}"),
            "expired": portal.assertion(iat=1_000_000, exp=1_000_060),
            "replayed": replayed,
            "no typ (an agent token)": portal.assertion(typ=None),
            "no jti": portal.assertion(jti=None),
            "another issuer": portal.assertion(iss="http://127.0.0.1:1"),
            "not a JWT": "not.a.jwt",
            "none": None,
        }
        answers = {why: _error(await portal.relay(FRIDAY, token)) for why, token in cases.items()}
        notes = agent.notes()
    key_unknown = "the portal token is signed by a key the portal does not publish"
    assert answers == {
        "another key": (401, "the relay assertion does not verify (Signature verification failed)"),
        "another kid": (401, key_unknown),
        "another agent": (401, "the relay assertion is for another agent (audience)"),
        "expired": (401, "the relay assertion has expired: get a new one"),
        "replayed": (401, "the relay assertion was used before (replayed jti)"),
        "no typ (an agent token)": (
            401,
            "the relay assertion is not one (its typ is not 'connect')",
        ),
        "no jti": (
            401,
            'the relay assertion does not verify (Token is missing the "jti" claim)',
        ),
        "another issuer": (
            401,
            f"the relay assertion is not from this agent's portal {portal.url}",
        ),
        "not a JWT": (401, "the relay assertion is not a JWT"),
        "none": (401, "a relayed request needs the portal's assertion"),
    }
    assert list(notes) == ["caller:bob"]  # the one valid relay's note, no other


async def _over_http(agent: Served, bearer: str) -> httpx.Response:
    """A request to the agent's own HTTP endpoint, with `bearer`."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=agent.app), base_url="http://agent"
    ) as http:
        return await http.post(
            "/agents/helper/chat/completions",
            headers={"Authorization": f"Bearer {bearer}"},
            json=FRIDAY,
        )


async def test_a4_an_assertion_is_no_bearer_token_over_http_and_a_token_no_assertion(
    tmp_path: Path,
) -> None:
    async with served_agent(tmp_path, "  - memory\n  - auth") as agent:
        portal = agent.portal
        await _connected(portal)
        token = portal.assertion(typ=None)  # the shape of an agent token the portal issues
        by_token = await _over_http(agent, token)
        by_assertion = await _over_http(agent, portal.assertion())
        relayed_token = _error(await portal.relay(FRIDAY, portal.assertion(typ=None)))
    assert by_token.status_code == 200, by_token.text
    assert (by_assertion.status_code, by_assertion.json()["error"]["message"]) == (
        401,
        "a Portal Connect assertion is not a bearer token for this agent",
    )
    assert relayed_token == (401, "the relay assertion is not one (its typ is not 'connect')")


async def test_a4_an_assertion_is_no_bearer_token_for_the_access_blocks_jwt_issuers_either(
    tmp_path: Path,
) -> None:
    async with served_agent(tmp_path, "  - memory", trust_as_issuer=True) as agent:
        portal = agent.portal
        as_issuer = await _over_http(agent, portal.assertion(aud="agent-test", typ=None))
        as_assertion = await _over_http(agent, portal.assertion(aud="agent-test"))
    assert as_issuer.status_code == 200, as_issuer.text
    assert (as_assertion.status_code, as_assertion.json()["error"]["message"]) == (
        401,
        "a Portal Connect assertion is not a bearer token for this agent",
    )


async def test_p12_the_portal_cancelling_a_request_stops_the_run(tmp_path: Path) -> None:
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        hang = {**FRIDAY, "stream": True, "messages": [{"role": "user", "content": "hang"}]}
        request_id = await portal.send_request(hang, portal.assertion())
        await asyncio.wait_for(agent.hanging.wait(), 30)
        await portal.cancel(request_id)
        await asyncio.wait_for(agent.stopped.wait(), 30)
        after = await portal.relay(FRIDAY, portal.assertion())  # the connection still serves
    assert after.status == 200


def _pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every pause of the connections between tries, in seconds (scaled down 100 times)."""
    pauses: list[float] = []
    real = asyncio.sleep

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        await real(seconds / 100)

    monkeypatch.setattr(connect_module, "_pause", pause)
    return pauses


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never came true")


async def test_p12_the_agent_reconnects_after_the_portal_restarts_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pauses = _pauses(monkeypatch)
    monkeypatch.setattr(connect_module, "STEADY_SECONDS", 0.0)
    caplog.set_level(logging.INFO, "webagents.connect")
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        port = portal.port
        await portal.stop()
        await _until(lambda: len(pauses) >= 4)  # several tries while it is away
        portal.port = port
        await portal.start()
        await _connected(portal)
        again = await portal.relay(FRIDAY, portal.assertion())
    assert again.status == 200
    said = [r.getMessage() for r in caplog.records if r.name == "webagents.connect"]
    lost = [s for s in said if "lost the connection" in s]
    assert len(lost) == 1 and lost[0].startswith(
        f"agent 'helper': lost the connection to the portal {portal.url} ("
    ), said
    assert lost[0].endswith("reconnecting in the background with backoff up to 30 s")
    assert [s.split(" (Portal")[0] for s in said if "connected" in s and "lost" not in s] == [
        f"agent 'helper': connected to the portal {portal.url}",
        f"agent 'helper': connected again after {len(pauses)} tries to the portal {portal.url}",
    ]
    # Doubling from half a second, each within its upper half, never over the cap.
    for tries, seconds in enumerate(pauses, start=1):
        ceiling = min(30.0, 0.5 * 2 ** (tries - 1))
        assert ceiling / 2 <= seconds <= ceiling


@pytest.mark.parametrize("how", ["status", "close"])
async def test_p12_a_portal_refusing_the_key_is_said_once_and_asked_again_rarely(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    pauses = _pauses(monkeypatch)
    caplog.set_level(logging.INFO, "webagents.connect")
    # "status": a 401 before the upgrade; "close": the upgrade taken, then closed with 4401.
    async with served_agent(tmp_path, key="rak_revoked", refuse=how) as agent:
        await _until(lambda: agent.portal.attempts >= 2)
    said = [r.getMessage() for r in caplog.records if r.name == "webagents.connect"]
    assert len(said) == 1 and said[0].startswith(
        f"agent 'helper': the portal {agent.portal.url} refused this agent's key"
    ), said
    assert said[0].endswith(
        "run webagents publish again (or set WEBAGENTS_AGENT_TOKEN to the agent's current key) "
        "(asked again every 300 s)"
    )
    assert pauses and set(pauses) == {300.0}


async def test_p12_a_portal_without_connect_is_said_once_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pauses = _pauses(monkeypatch)
    async with served_agent(tmp_path, refuse="missing") as agent:
        await _until(lambda: agent.portal.attempts >= 2)
    said = [r.getMessage() for r in caplog.records if r.name == "webagents.connect"]
    assert said == [
        f"agent 'helper': the portal {agent.portal.url} has no Portal Connect endpoint (/ws "
        "answered 403): update the portal, or serve with --no-connect (asked again every 300 s)"
    ]
    assert pauses and set(pauses) == {300.0}


async def test_p12_a_key_the_portal_knows_as_another_agent_is_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pauses = _pauses(monkeypatch)
    other = str(uuid.uuid4())
    async with served_agent(tmp_path, hello_agent_id=other) as agent:
        await _until(lambda: agent.portal.attempts >= 2)
    said = [r.getMessage() for r in caplog.records if r.name == "webagents.connect"]
    assert said == [
        f"agent 'helper': the portal {agent.portal.url} knows this key as agent {other!r}, not "
        f"as {agent.portal.agent_id} (the folder's link): run webagents publish again (asked "
        "again every 300 s)"
    ]
    assert pauses and set(pauses) == {300.0}


def test_p12_serve_connect_without_a_link_or_a_key_says_what_to_do(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "helper", "name: helper")
    result = CliRunner().invoke(main, ["serve", str(folder), "--offline", "--connect"])
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        "--connect: agent 'helper' has no key for Portal Connect on this machine: run "
        "webagents publish in its folder, or set WEBAGENTS_AGENT_TOKEN"
    ), result.output


def test_p12_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    for tries in range(1, 40):
        ceiling = min(30.0, 0.5 * 2 ** (tries - 1))
        drawn = [backoff(tries) for _ in range(20)]
        assert all(ceiling / 2 <= d <= ceiling for d in drawn)
    assert len({backoff(10) for _ in range(20)}) > 1  # jittered, not one fixed delay


async def test_p12_the_daemon_connects_each_published_agent_and_drops_a_removed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect_module, "SYNC_SECONDS", 0.05)
    root = tmp_path / "agents"
    portals: dict[str, FakePortal] = {}
    for name in ("alpha", "beta"):
        agent_id = str(uuid.uuid4())
        portals[name] = portal = await FakePortal(agent_id, f"rak_{name}", name=name).start()
        folder = write_agent(root / name, f"name: {name}\nskills:\n  - memory")
        (folder / ".webagents").mkdir()
        link = {"agentId": agent_id, "agentName": name, "portal": portal.url}
        (folder / ".webagents" / "config.json").write_text(json.dumps({"link": link}))
        agent_key_file(agent_id).parent.mkdir(parents=True, exist_ok=True)
        agent_key_file(agent_id).write_text(f"rak_{name}\n")
    write_agent(root / "local", "name: local")  # not published: no connection
    host = FolderHost(root, model=_model(asyncio.Event(), asyncio.Event()))
    connector = Connector(host, forced=False, profile=None)
    app = create_app(host, connect=connector.run)
    try:
        async with app.router.lifespan_context(app):
            for portal in portals.values():
                await _connected(portal)
            answers = {
                name: await portal.relay({**FRIDAY, "model": name}, portal.assertion())
                for name, portal in portals.items()
            }
            (root / "beta" / "AGENT.md").unlink()
            await host.reload({root / "beta" / "AGENT.md"})
            await _until(lambda: not portals["beta"].connected.is_set())
            targets = sorted(t.agent for t in connector.connections)
    finally:
        for portal in portals.values():
            await portal.stop()
    assert {name: a.status for name, a in answers.items()} == {"alpha": 200, "beta": 200}
    assert {name: a.json()["model"] for name, a in answers.items()} == {
        "alpha": "alpha",
        "beta": "beta",
    }
    assert targets == ["alpha"]


async def test_a4_requests_arriving_together_share_one_fetch_of_the_portals_keys() -> None:
    portal = FakePortal(str(uuid.uuid4()), KEY)  # not started: its keys are served here
    fetched: list[str] = []

    async def jwks(request: httpx.Request) -> httpx.Response:
        fetched.append(str(request.url))
        await asyncio.sleep(0.2)  # still on its way when the others ask
        return httpx.Response(200, json=portal.jwks())

    keys = AuthSkill.for_connect(portal.url, portal.agent_id)
    keys._http = httpx.AsyncClient(transport=httpx.MockTransport(jwks))
    callers = await asyncio.gather(
        keys.warm(), *(keys.relayed_caller(portal.assertion(username=f"u{i}")) for i in range(3))
    )
    await keys.aclose()
    assert callers[1:] == [Caller.verified(f"u{i}") for i in range(3)]
    assert fetched == [f"{portal.url}/.well-known/jwks.json"]
