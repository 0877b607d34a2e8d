"""Issue 24: the Responses API's wire, in process (server/responses_*.py, kept_responses.py):
the whole `response` object, the streamed events and their numbers, a failed turn's events,
and the refusals. The official client against a real `webagents serve` is in tests/e2e/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from webagents import Agent
from webagents.access import AccessVerifier
from webagents.agent_spec import AccessSpec
from webagents.errors import ModelError
from webagents.model import ModelRequest
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.skills.session import SessionSkill
from webagents.testing import ScriptedModel

KEYS = {"OWNER": "owner-key", "ALICE": "alice-key", "BOB": "bob-key"}
ACCESS = AccessSpec(
    owner="env:OWNER", keys={"alice@example.com": "env:ALICE", "bob@example.com": "env:BOB"}
)
ALICE = {"Authorization": "Bearer alice-key"}


def _served(name: str, model: ScriptedModel, tmp_path: Path | None = None) -> ServedAgent:
    skills = [SessionSkill(agent_dir=tmp_path)] if tmp_path is not None else []
    agent = Agent(name, f"You are {name}.", skills=list(skills), model=model)
    return ServedAgent(agent, AccessVerifier(ACCESS, environ=KEYS))


def _client(*served: ServedAgent) -> TestClient:
    return TestClient(create_app(AgentHost(list(served))), raise_server_exceptions=False)


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        kind, data = block.split("\n")
        assert kind.startswith("event: ") and data.startswith("data: ")
        events.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_issue24_responses_answer_is_a_whole_response_object(tmp_path: Path) -> None:
    with _client(_served("keeper", ScriptedModel(["hello there"]), tmp_path)) as client:
        answer = client.post(
            "/v1/responses", json={"model": "keeper", "input": "hi", "store": True}, headers=ALICE
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    conversation = body["conversation"]["id"]
    assert conversation.startswith("conv_")
    assert body["id"] == f"resp_0_1_{body['id'].split('_')[3]}_{conversation}"
    item_id = body["output"][0]["id"]
    assert body == {
        "id": body["id"],
        "object": "response",
        "created_at": body["created_at"],
        "status": "completed",
        "model": "keeper",
        "output": [
            {
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "text": "hello there",
                        "annotations": [],
                        "logprobs": [],
                    }
                ],
            }
        ],
        "output_text": "hello there",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": False,
        "temperature": None,
        "top_p": None,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": {"type": "text"}},
        "previous_response_id": None,
        "conversation": {"id": conversation},
        "store": True,
        "usage": body["usage"],
    }
    assert set(body["usage"]) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }


def test_issue24_streamed_events_are_numbered_in_order(tmp_path: Path) -> None:
    with _client(_served("keeper", ScriptedModel(["streamed reply"]), tmp_path)) as client:
        answer = client.post("/v1/responses", json={"input": "hi", "stream": True}, headers=ALICE)
    assert answer.status_code == 200
    events = _events(answer.text)
    kinds = [kind for kind, _ in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert [data["type"] for _, data in events] == kinds
    assert "".join(data["delta"] for kind, data in events if kind.endswith(".delta")) == (
        "streamed reply"
    )
    created, completed = events[0][1]["response"], events[-1][1]["response"]
    assert (created["status"], created["output"]) == ("in_progress", [])
    assert completed["status"] == "completed"
    assert completed["id"] == created["id"]
    assert completed["output"][0]["content"][0]["text"] == "streamed reply"


def test_issue24_a_failed_turn_ends_with_response_failed(tmp_path: Path) -> None:
    def broken(request: ModelRequest) -> str:
        raise ModelError("the endpoint is down")

    with _client(_served("keeper", ScriptedModel([broken]), tmp_path)) as client:
        answer = client.post("/v1/responses", json={"input": "hi", "stream": True}, headers=ALICE)
    events = _events(answer.text)
    assert [kind for kind, _ in events][-1] == "response.failed"
    failed = events[-1][1]["response"]
    assert (failed["status"], failed["error"]) == (
        "failed",
        {"code": "server_error", "message": "the agent's model endpoint failed; try again later"},
    )
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))


def test_issue24_responses_refusals(tmp_path: Path) -> None:
    keeper = _served("keeper", ScriptedModel(["one", "two"]), tmp_path)
    other = _served("other", ScriptedModel([]))

    def error(answer: Any) -> tuple[int, str]:
        return answer.status_code, answer.json()["error"]["code"]

    with _client(keeper, other) as client:
        first = client.post("/agents/keeper/responses", json={"input": "one"}, headers=ALICE).json()
        client.post(
            "/agents/keeper/responses",
            json={"input": "two", "previous_response_id": first["id"]},
            headers=ALICE,
        )
        seen = {
            "an earlier response continued": error(
                client.post(
                    "/agents/keeper/responses",
                    json={"input": "x", "previous_response_id": first["id"]},
                    headers=ALICE,
                )
            ),
            "an earlier response deleted": error(
                client.delete(f"/agents/keeper/responses/{first['id']}", headers=ALICE)
            ),
            "store false continuing": error(
                client.post(
                    "/agents/keeper/responses",
                    json={"input": "x", "store": False, "conversation": "c1"},
                    headers=ALICE,
                )
            ),
            "an unknown conversation": error(
                client.post(
                    "/agents/keeper/responses",
                    json={"input": "x", "conversation": "nothing-here"},
                    headers=ALICE,
                )
            ),
            "at /v1 with two agents, no model": error(
                client.get(f"/v1/responses/{first['id']}", headers=ALICE)
            ),
            "bob reads alice's": error(
                client.get(
                    f"/agents/keeper/responses/{first['id']}",
                    headers={"Authorization": "Bearer bob-key"},
                )
            ),
            "a forged key": error(
                client.get(
                    f"/agents/keeper/responses/{first['id']}",
                    headers={"Authorization": "Bearer forged"},
                )
            ),
            "the last input not the user's": error(
                client.post(
                    "/agents/keeper/responses",
                    json={"input": [{"role": "assistant", "content": "x"}]},
                    headers=ALICE,
                )
            ),
            "an agent with no session skill": error(
                client.post("/agents/other/conversations", json={}, headers=ALICE)
            ),
        }
    assert seen == {
        "an earlier response continued": (409, "not_latest"),
        "an earlier response deleted": (409, "not_latest"),
        "store false continuing": (400, "invalid_request"),
        "an unknown conversation": (404, "not_found"),
        "at /v1 with two agents, no model": (400, "agent_required"),
        "bob reads alice's": (404, "not_found"),
        "a forged key": (401, "invalid_credential"),
        "the last input not the user's": (400, "invalid_input"),
        "an agent with no session skill": (400, "not_kept"),
    }


def test_issue24_a_conversation_that_went_on_meanwhile_is_a_409_and_keeps_the_other(
    tmp_path: Path,
) -> None:
    skill = SessionSkill(agent_dir=tmp_path)

    def meanwhile(request: ModelRequest) -> str:
        # Another request's turn is kept while this one waits for its model.
        store = skill.store
        kept = store.open("caller:alice@example.com", conversation)
        assert kept is not None
        session, version = kept
        session = session.copy()
        session["messages"] = [*session["messages"], *OTHER]
        store.save("caller:alice@example.com", session, since=version)
        return "late"

    OTHER = [{"role": "user", "content": "other"}, {"role": "assistant", "content": "kept"}]
    agent = Agent(
        "keeper", "You are keeper.", skills=[skill], model=ScriptedModel(["one", meanwhile])
    )
    served = ServedAgent(agent, AccessVerifier(ACCESS, environ=KEYS))
    with _client(served) as client:
        first = client.post("/v1/responses", json={"input": "one"}, headers=ALICE).json()
        conversation = first["conversation"]["id"]
        answer = client.post(
            "/v1/responses",
            json={"input": "two", "previous_response_id": first["id"]},
            headers=ALICE,
        )
        items = client.get(
            f"/v1/conversations/{conversation}/items?order=asc", headers=ALICE
        ).json()
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "conversation_changed"
    assert [i["content"][0]["text"] for i in items["data"]] == ["one", "one", "other", "kept"]


def test_issue24_a_responses_conversation_is_a_kept_session_listed_like_any_other(
    tmp_path: Path,
) -> None:
    skill = SessionSkill(agent_dir=tmp_path)
    agent = Agent("keeper", "You are keeper.", skills=[skill], model=ScriptedModel(["a", "b"]))
    served = ServedAgent(agent, AccessVerifier(ACCESS, environ=KEYS))
    owner = {"Authorization": "Bearer owner-key"}
    with _client(served) as client:
        first = client.post("/v1/responses", json={"input": "plan"}, headers=owner).json()
        chat = client.post(
            "/v1/chat/completions",
            json={
                "model": "keeper",
                "messages": [{"role": "user", "content": "plan"}],
                "metadata": {"session_id": "by-chat"},
            },
            headers=owner,
        )
        # A Chat Completions session is a conversation of the Responses API too.
        items = client.get("/v1/conversations/by-chat/items?order=asc", headers=owner).json()
    assert chat.status_code == 200
    assert [i["content"][0]["text"] for i in items["data"]] == ["plan", "b"]
    listed = {summary.id: summary.title for summary in skill.store.recent("owner")}
    assert listed == {first["conversation"]["id"]: "plan", "by-chat": "plan"}


def test_issue24_store_false_with_any_conversation_id_is_the_same_400(tmp_path: Path) -> None:
    """docs/responses.md: what a `store: false` turn adds is not kept, so it names no kept
    conversation, whichever field names it (`metadata.session_id` too, as `conversation`
    and `previous_response_id` do), and nothing is run or kept for it."""
    keeper = _served("keeper", ScriptedModel(["one"]), tmp_path)
    named: dict[str, dict[str, Any]] = {
        "conversation": {"conversation": "c1"},
        "previous_response_id": {"previous_response_id": "resp_x"},
        "metadata.session_id": {"metadata": {"session_id": "c1"}},
    }
    with _client(keeper) as client:
        answers = {
            field: client.post(
                "/agents/keeper/responses",
                json={"input": "x", "store": False, **extra},
                headers=ALICE,
            )
            for field, extra in named.items()
        }
        unnamed = client.post(
            "/agents/keeper/responses", json={"input": "x", "store": False}, headers=ALICE
        ).json()
    refusal = {
        "error": {
            "message": "store: false cannot continue a kept conversation (what it added would "
            "not be kept); send store: true, or the whole conversation as input without an id",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request",
        }
    }
    assert {f: (a.status_code, a.json()) for f, a in answers.items()} == dict.fromkeys(
        named, (400, refusal)
    )
    assert (unnamed["store"], unnamed["conversation"]) == (False, None)
    assert [p.name for p in tmp_path.rglob("c1*")] == []
