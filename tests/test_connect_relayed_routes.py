"""Portal Connect's relay frame names a method and a path below the agent (SPEC P12, issue 24):
the agent routes it through its own app, the same routes `serve` answers over HTTP
(server/relay.py), so the Responses API and Conversations are relayed as Chat Completions is,
each caller verified by the portal's assertion. A frame that names neither (a portal of the
previous version) is POST chat/completions; a path the agent does not serve is a 404, a
method its route does not take a 405, and a path that is not below the agent is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.connect_agent_side_helpers import FRIDAY, _connected, served_agent
from tests.connect_portal import FakePortal, Reply


async def _call(portal: FakePortal, username: str, method: str, path: str, **rest: Any) -> Reply:
    body = rest.pop("body", None)
    return await portal.relay(
        body, portal.assertion(username=username), method=method, path=path, **rest
    )


def _offline(turn: int, said: str) -> str:
    return (
        f"(offline scripted model, turn {turn}) You said: {said!r}. I can't think offline, but "
        "everything around me works: the chat, the slash commands and my skills' tools."
    )


def _item(item_id: str, role: str, text: str) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "input_text", "text": text}
    if role == "assistant":
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": item_id,
        "role": role,
        "status": "completed",
        "content": [part],
    }


def _ok(reply: Reply) -> Any:
    assert (reply.status, reply.error) == (200, None), reply
    assert reply.headers["content-type"] == "application/json", reply
    return reply.json()


async def test_p12_a_relayed_frame_is_routed_to_the_responses_and_conversations_routes(
    tmp_path: Path,
) -> None:
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        first = _ok(await _call(portal, "bob", "POST", "responses", body={"input": "hello"}))
        second = _ok(
            await _call(
                portal,
                "bob",
                "POST",
                "responses",
                body={"input": "again", "previous_response_id": first["id"]},
            )
        )
        retrieved = _ok(await _call(portal, "bob", "GET", f"responses/{second['id']}"))
        items = _ok(
            await _call(
                portal, "bob", "GET", f"responses/{second['id']}/input_items", query="limit=1"
            )
        )
        others = await _call(portal, "carol", "GET", f"responses/{second['id']}")
        made = _ok(await _call(portal, "bob", "POST", "conversations", body={}))
        conversation = _ok(await _call(portal, "bob", "GET", f"conversations/{made['id']}"))
        kept = _ok(
            await _call(portal, "bob", "GET", f"conversations/{first['conversation']['id']}/items")
        )
        deleted = _ok(await _call(portal, "bob", "DELETE", f"responses/{second['id']}"))
    assert (first["object"], first["status"], first["store"]) == ("response", "completed", True)
    assert second["previous_response_id"] == first["id"]
    assert second["conversation"] == first["conversation"]
    said = [part["text"] for part in second["output"][0]["content"]]
    assert said == [_offline(2, "again")]
    assert [part["text"] for part in retrieved["output"][0]["content"]] == said
    assert retrieved["id"] == second["id"]
    assert (items["data"], items["has_more"]) == ([_item("msg_2", "user", "again")], False)
    assert (others.status, others.json()["error"]["code"]) == (404, "not_found"), others
    assert (conversation["id"], conversation["object"], conversation["metadata"]) == (
        made["id"],
        "conversation",
        {},
    )
    assert kept["data"] == [
        _item("msg_3", "assistant", _offline(2, "again")),
        _item("msg_2", "user", "again"),
        _item("msg_1", "assistant", _offline(1, "hello")),
        _item("msg_0", "user", "hello"),
    ]
    assert deleted == {"id": second["id"], "object": "response.deleted", "deleted": True}


async def test_p12_a_frame_without_method_or_path_is_post_chat_completions(
    tmp_path: Path,
) -> None:
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        old = await portal.relay(FRIDAY, portal.assertion(username="bob"))  # no method, no path
        named = await _call(portal, "bob", "POST", "chat/completions", body=FRIDAY)
    assert _ok(old)["object"] == "chat.completion"
    assert _ok(named)["object"] == "chat.completion"


def _refusal(reply: Reply) -> tuple[int, dict[str, Any]]:
    assert reply.error is None, reply
    return reply.status, reply.json()


async def test_p12_a_relayed_path_not_served_is_404_and_a_method_not_taken_is_405(
    tmp_path: Path,
) -> None:
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        unknown = await _call(portal, "bob", "GET", "files")
        wrong_method = await _call(portal, "bob", "GET", "chat/completions")
    assert _refusal(unknown) == (
        404,
        {
            "error": {
                "message": "there is nothing at /agents/helper/files",
                "type": "not_found_error",
                "param": None,
                "code": "not_found",
            }
        },
    )
    assert _refusal(wrong_method) == (
        405,
        {
            "error": {
                "message": "/agents/helper/chat/completions does not take GET: send POST",
                "type": "invalid_request_error",
                "param": None,
                "code": "method_not_allowed",
            }
        },
    )
    assert wrong_method.headers["allow"] == "POST"


async def test_p12_a_relayed_path_outside_the_agent_or_an_unreadable_method_is_refused(
    tmp_path: Path,
) -> None:
    targets = {
        "up and out": {"method": "GET", "path": "../../v1/models"},
        "a dot": {"method": "GET", "path": "./responses"},
        "an empty segment": {"method": "GET", "path": "responses//x"},
        "nothing": {"method": "GET", "path": ""},
        "a query in the path": {"method": "GET", "path": "responses?x=1"},
        "a lower-case method": {"method": "get", "path": "responses/x"},
        "a space in the query": {"method": "GET", "path": "responses/x", "query": "a b"},
    }
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        answers = {
            why: (await portal.relay(None, portal.assertion(), **target)).error
            for why, target in targets.items()
        }
        after = await portal.relay(FRIDAY, portal.assertion())
    refused = {
        "type": "error",
        "status": 400,
        "message": "the portal relayed a request whose method or path the agent cannot read: "
        "send the request to a path below /agents/<name>/",
        "code": "bad_target",
    }
    assert answers == {why: {**refused, "id": answers[why]["id"]} for why in targets}  # type: ignore[index]
    assert _ok(after)["object"] == "chat.completion"
