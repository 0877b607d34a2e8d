"""Chats over the API (P9): turns recorded as given and read back in order, listed newest
first; the limits per call (50 messages, 100,000 characters) refused with what to do, longer
conversations in more calls and a long message in parts; a resent call records nothing
twice; 401 for a sign-in that fails, 404 for an agent or chat that is not the user's."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from webagents.portal.db.tables import ChatMessage

from .chats_helpers import Headers, _agent, _bearer, _post, _refusal


def _read(client: TestClient, headers: Headers, agent_id: str, chat_id: str) -> list[Any]:
    answer = client.get(f"/api/agents/{agent_id}/conversations/{chat_id}", headers=headers)
    assert answer.status_code == 200, answer.text
    messages: list[Any] = answer.json()["messages"]
    return messages


def _listed(client: TestClient, headers: Headers, agent_id: str, query: str = "") -> list[Any]:
    answer = client.get(f"/api/agents/{agent_id}/conversations{query}", headers=headers)
    assert answer.status_code == 200, answer.text
    assert sorted(answer.json()) == ["conversations"]
    found: list[Any] = answer.json()["conversations"]
    return found


TURNS = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
]


def test_p9_record_then_read_the_turns_in_order(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    recorded = _post(client, alice, agent_id, {"sessionId": "s-1", "messages": TURNS})
    assert sorted(recorded) == ["chatId"]
    assert _read(client, alice, agent_id, recorded["chatId"]) == TURNS
    listed = _listed(client, alice, agent_id)
    assert listed == [
        {
            "chatId": recorded["chatId"],
            "sessionId": "s-1",
            "updatedAt": listed[0]["updatedAt"],
            "messageCount": 2,
            "preview": "What is the capital of France?",
        }
    ]


def test_p9_more_calls_append_by_chat_id_or_by_session_id(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    chat_id = _post(client, alice, agent_id, {"sessionId": "s-1", "messages": TURNS})["chatId"]
    more = [{"role": "user", "content": "And of Italy?"}, {"role": "assistant", "content": "Rome."}]
    by_id = _post(
        client, alice, agent_id, {"sessionId": "s-1", "chatId": chat_id, "messages": more[:1]}
    )
    by_session = _post(client, alice, agent_id, {"sessionId": "s-1", "messages": more[1:]})
    assert by_id == by_session == {"chatId": chat_id}
    assert _read(client, alice, agent_id, chat_id) == TURNS + more
    other = _post(client, alice, agent_id, {"sessionId": "s-2", "messages": more})["chatId"]
    assert other != chat_id
    assert [c["chatId"] for c in _listed(client, alice, agent_id)] == [other, chat_id]


def test_p9_an_access_token_of_webagents_login_records_too(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    token = client.post("/api/auth/cli/token", headers=alice, json={}).json()["access_token"]
    signed_in = {"Authorization": f"Bearer {token}"}
    chat_id = _post(client, signed_in, agent_id, {"sessionId": "s", "messages": TURNS})["chatId"]
    assert _read(client, alice, agent_id, chat_id) == TURNS
    client.post("/api/auth/cli/logout", headers=signed_in)
    ended = client.get(f"/api/agents/{agent_id}/conversations", headers=signed_in)
    assert ended.status_code == 401
    assert "run webagents login" in ended.json()["error"]["message"]


def test_p9_tool_calls_and_results_are_kept_as_given(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"city": "Paris"}'},
    }
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris?", "id": "m1"},
        {"role": "assistant", "content": None, "tool_calls": [call], "id": "m2"},
        {"role": "tool", "content": "18 C, sunny", "tool_call_id": "call_1", "name": "lookup"},
        {"role": "assistant", "content": "18 C and sunny."},
    ]
    chat_id = _post(client, alice, agent_id, {"sessionId": "s", "messages": turns})["chatId"]
    assert _read(client, alice, agent_id, chat_id) == turns


def test_p9_a_resent_call_records_nothing_twice(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    first = [{**TURNS[0], "id": "m1"}, {**TURNS[1], "id": "m2"}]
    body = {"sessionId": "s", "messages": first}
    chat_id = _post(client, alice, agent_id, body)["chatId"]
    updated = _listed(client, alice, agent_id)[0]["updatedAt"]
    assert _post(client, alice, agent_id, body) == {"chatId": chat_id}  # the answer was lost
    assert _listed(client, alice, agent_id)[0]["updatedAt"] == updated
    # A resend that overlaps new messages records only the new ones.
    later = {"role": "user", "content": "Thanks", "id": "m3"}
    _post(client, alice, agent_id, {"sessionId": "s", "messages": [*first[1:], later]})
    assert _read(client, alice, agent_id, chat_id) == [*first, later]
    reused = client.post(
        f"/api/agents/{agent_id}/conversations",
        headers=alice,
        json={"sessionId": "s", "messages": [{"role": "user", "content": "Other", "id": "m1"}]},
    )
    assert (reused.status_code, reused.json()) == _refusal(
        409,
        "message id 'm1' is recorded in this chat already with other content: give each "
        "message its own id",
        "message_id_reused",
    )
    assert _read(client, alice, agent_id, chat_id) == [*first, later]


def test_p9_120_messages_in_3_calls_read_back_whole(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    turns = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}", "id": f"m{n}"}
        for n in range(120)
    ]
    chat_ids = {
        _post(
            client, alice, agent_id, {"sessionId": "long", "messages": turns[start : start + 50]}
        )["chatId"]
        for start in (0, 50, 100)
    }
    assert len(chat_ids) == 1
    assert _read(client, alice, agent_id, chat_ids.pop()) == turns
    assert _listed(client, alice, agent_id)[0]["messageCount"] == 120


def test_p9_a_250000_character_message_in_parts_reads_back_whole(
    client: TestClient, db: Session
) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    long = "".join(f"{n:09d}\n" for n in range(25_000))  # 250,000 characters, none repeated
    assert len(long) == 250_000
    parts = [long[:100_000], long[100_000:200_000], long[200_000:]]

    def part(index: int) -> dict[str, Any]:
        return {
            "role": "user",
            "content": parts[index],
            "id": "big",
            "part": {"index": index, "of": 3},
        }

    body = {"sessionId": "s", "messages": [TURNS[0], part(0)]}
    chat_id = _post(client, alice, agent_id, body)["chatId"]
    # Not shown, counted or followed by another message until it is whole.
    assert _read(client, alice, agent_id, chat_id) == [TURNS[0]]
    early = client.post(
        f"/api/agents/{agent_id}/conversations",
        headers=alice,
        json={"sessionId": "s", "messages": [TURNS[1]]},
    )
    assert (early.status_code, early.json()) == _refusal(
        409,
        "message 'big' has 1 of its 3 parts: send part 1 (and the rest) before another message",
        "message_incomplete",
    )
    _post(client, alice, agent_id, {"sessionId": "s", "messages": [part(0), part(1)]})  # resent 0
    _post(client, alice, agent_id, {"sessionId": "s", "messages": [part(2), TURNS[1]]})
    _post(client, alice, agent_id, {"sessionId": "s", "messages": [part(2)]})  # resent 2
    assert _read(client, alice, agent_id, chat_id) == [
        TURNS[0],
        {"role": "user", "content": long, "id": "big"},
        TURNS[1],
    ]
    assert _listed(client, alice, agent_id)[0]["messageCount"] == 3


def test_p9_parts_out_of_order_are_refused(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    url = f"/api/agents/{agent_id}/conversations"

    def send(*parts: tuple[int, int]) -> Any:
        messages = [
            {"role": "user", "content": "x", "id": "p", "part": {"index": i, "of": n}}
            for i, n in parts
        ]
        return client.post(url, headers=alice, json={"sessionId": "s", "messages": messages})

    skipped = send((1, 2))
    assert (skipped.status_code, skipped.json()) == _refusal(
        400,
        "part 1 of message 'p' came before its part 0: send the parts of a message in order",
        "part_out_of_order",
    )
    assert send((0, 3)).status_code == 200
    gap = send((2, 3))
    assert (gap.status_code, gap.json()) == _refusal(
        400,
        "part 2 of message 'p' came before its part 1: send the parts of a message in order",
        "part_out_of_order",
    )
    other_count = send((1, 4))
    assert (other_count.status_code, other_count.json()) == _refusal(
        409,
        "message 'p' was begun in 3 parts, not 4: send it in the same number of parts",
        "message_id_reused",
    )
    no_id = client.post(
        url,
        headers=alice,
        json={
            "sessionId": "t",
            "messages": [{"role": "user", "content": "x", "part": {"index": 0, "of": 2}}],
        },
    )
    assert (no_id.status_code, no_id.json()) == _refusal(
        400,
        "messages[0] is a part without an id: give every part of a message the same id",
        "bad_part",
    )


def test_p9_refuses_calls_over_the_limits_and_bad_messages(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    url = f"/api/agents/{agent_id}/conversations"

    def send(messages: list[Any], **more: Any) -> tuple[int, Any]:
        answer = client.post(
            url, headers=alice, json={"sessionId": "s", "messages": messages, **more}
        )
        return answer.status_code, answer.json()

    one = {"role": "user", "content": "hi"}
    assert send([one] * 51) == _refusal(
        400,
        "51 messages in one call; at most 50 a call: send the rest in more calls (they "
        "append to the same chat, by chatId or sessionId)",
        "too_many_messages",
    )
    assert send([one, {"role": "user", "content": "x" * 100_001}]) == _refusal(
        413,
        "messages[1].content has 100,001 characters; at most 100,000 a message in one call: "
        'send a longer message in parts (each with the same id and "part": {"index": 0, 1, '
        '..., "of": parts}), over more calls if needed; it is read back whole',
        "message_too_long",
    )
    assert send([{"role": "robot", "content": "hi"}]) == _refusal(
        400,
        "messages[0].role is 'robot': a chat message is one of user, assistant, tool, system",
        "bad_role",
    )
    assert send([]) == _refusal(400, "messages is empty: send at least one message", "no_messages")
    assert send([{"role": "user", "content": None}]) == _refusal(
        400, "messages[0] is empty: give content (a string), or tool_calls", "empty_message"
    )
    assert send([{"role": "user", "content": "hi", "tool_calls": []}]) == _refusal(
        400, "messages[0]: only an assistant message has tool_calls", "bad_tool"
    )
    huge_call = {
        "id": "c",
        "type": "function",
        "function": {"name": "f", "arguments": "a" * 100_000},
    }
    assert send([{"role": "assistant", "content": None, "tool_calls": [huge_call]}]) == _refusal(
        413,
        "messages[0].tool_calls is 100,077 characters of JSON; at most 100,000: shorten the "
        "arguments",
        "message_too_long",
    )
    assert send([{"role": "assistant", "content": "x", "tool_call_id": "c"}]) == _refusal(
        400, "messages[0]: only a tool message has tool_call_id", "bad_tool"
    )
    assert send([{"role": "tool", "content": "a\x00b", "tool_call_id": "c"}]) == _refusal(
        400,
        "messages[0].content holds a NUL character (U+0000), which the portal cannot keep: "
        "remove it or replace it (with U+FFFD, say) and send the call again",
        "unstorable_text",
    )
    lone = client.post(
        url,
        headers={**alice, "Content-Type": "application/json"},
        content=b'{"sessionId": "s", "messages": [{"role": "user", "content": "\\ud800"}]}',
    )
    assert (lone.status_code, lone.json()) == _refusal(
        400,
        "messages[0].content holds half of a UTF-16 surrogate pair, which is not text: send "
        "valid Unicode",
        "unstorable_text",
    )
    status, body = send([{"role": "user", "content": "hi", "color": "red"}])
    assert (status, body["error"]["code"]) == (400, "invalid_request")
    no_session = client.post(url, headers=alice, json={"messages": [one]})
    assert (no_session.status_code, no_session.json()["error"]["message"]) == (
        400,
        "the request is not valid: body.sessionId: Field required",
    )
    # Nothing of a refused call is kept, and exactly 50 (of 100,000 characters) are taken.
    assert _listed(client, alice, agent_id) == []
    fifty = [{"role": "user", "content": "y" * 100_000}] * 50
    chat_id = _post(client, alice, agent_id, {"sessionId": "s", "messages": fifty})["chatId"]
    assert _read(client, alice, agent_id, chat_id) == fifty
    assert db.scalar(select(func.count()).select_from(ChatMessage)) == 50


def test_p9_401_without_a_valid_sign_in(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    chat_id = _post(client, alice, agent_id, {"sessionId": "s", "messages": TURNS})["chatId"]
    base = f"/api/agents/{agent_id}/conversations"
    for headers in [{}, {"Authorization": "Bearer rok_forged"}, {"Authorization": "Bearer x.y.z"}]:
        for method, path, body in [
            ("POST", base, {"sessionId": "s", "messages": TURNS}),
            ("GET", base, None),
            ("GET", f"{base}/{chat_id}", None),
        ]:
            answer = client.request(method, path, headers=headers, json=body)
            assert answer.status_code == 401, (headers, method, path)
            assert answer.headers["www-authenticate"] == "Bearer"
    assert _read(client, alice, agent_id, chat_id) == TURNS


def test_p9_another_users_agent_and_chat_answer_404(client: TestClient, db: Session) -> None:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    alices_agent = _agent(client, alice)
    bobs_agent = _agent(client, bob, "bobs-helper")
    chat_id = _post(client, alice, alices_agent, {"sessionId": "s", "messages": TURNS})["chatId"]
    no_agent = _refusal(
        404,
        "you have no such agent on this portal: publish it (webagents publish), or see your "
        "agents with GET /api/agents",
        "not_found",
    )
    for agent_id in [alices_agent, "00000000-0000-0000-0000-000000000000", "not-a-uuid"]:
        base = f"/api/agents/{agent_id}/conversations"
        for method, path, body in [
            ("POST", base, {"sessionId": "s", "messages": TURNS}),
            ("POST", base, {"sessionId": "s", "chatId": chat_id, "messages": TURNS}),
            ("GET", base, None),
            ("GET", f"{base}/{chat_id}", None),
        ]:
            answer = client.request(method, path, headers=bob, json=body)
            assert (answer.status_code, answer.json()) == no_agent, (agent_id, method)
    # Bob's own agent does not reach Alice's chat either.
    no_chat = _refusal(
        404,
        f"you have no chat {chat_id!r} with this agent: see your chats with "
        "GET /api/agents/{id}/conversations, or leave chatId out to record by sessionId",
        "chat_not_found",
    )
    theirs = f"/api/agents/{bobs_agent}/conversations"
    answer = client.get(f"{theirs}/{chat_id}", headers=bob)
    assert (answer.status_code, answer.json()) == no_chat
    answer = client.post(
        theirs, headers=bob, json={"sessionId": "s", "chatId": chat_id, "messages": TURNS}
    )
    assert (answer.status_code, answer.json()) == no_chat
    # Alice's chat with another of her agents is not this agent's.
    second = _agent(client, alice, "second")
    answer = client.get(f"/api/agents/{second}/conversations/{chat_id}", headers=alice)
    assert answer.status_code == 404
    assert _listed(client, bob, bobs_agent) == []
    assert _read(client, alice, alices_agent, chat_id) == TURNS


def test_p9_the_same_session_id_is_one_chat_per_user(client: TestClient, db: Session) -> None:
    """Bob records under the session id of Alice's chat with his own agent: two chats."""
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    alices = _post(client, alice, _agent(client, alice), {"sessionId": "s", "messages": TURNS})
    bobs_agent = _agent(client, bob, "bobs-helper")
    bobs = _post(client, bob, bobs_agent, {"sessionId": "s", "messages": TURNS[:1]})
    assert bobs != alices
    assert _read(client, bob, bobs_agent, bobs["chatId"]) == TURNS[:1]


def test_p9_the_list_is_newest_first_with_a_limit(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    made = [
        _post(
            client,
            alice,
            agent_id,
            {
                "sessionId": f"s{n}",
                "messages": [{"role": "user", "content": f"  chat\n{n} " + "z" * 200}],
            },
        )["chatId"]
        for n in range(3)
    ]
    _post(client, alice, agent_id, {"sessionId": "s0", "messages": TURNS[1:]})  # s0 is newest
    listed = _listed(client, alice, agent_id)
    assert [c["chatId"] for c in listed] == [made[0], made[2], made[1]]
    assert [c["messageCount"] for c in listed] == [2, 1, 1]
    assert listed[0]["preview"] == "chat 0 " + "z" * 112 + "…"
    assert [c["chatId"] for c in _listed(client, alice, agent_id, "?limit=2")] == [
        made[0],
        made[2],
    ]
    bad = client.get(f"/api/agents/{agent_id}/conversations?limit=0", headers=alice)
    assert bad.status_code == 400


def test_p9_recording_makes_no_answer(client: TestClient, db: Session) -> None:
    """Only what was sent is kept: the portal adds no reply of the agent's."""
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    question = [{"role": "user", "content": "Are you there?"}]
    chat_id = _post(client, alice, agent_id, {"sessionId": "s", "messages": question})["chatId"]
    assert _read(client, alice, agent_id, chat_id) == question
    assert db.scalar(select(func.count()).select_from(ChatMessage)) == 1
