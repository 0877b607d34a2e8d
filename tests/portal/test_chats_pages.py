"""The owner's chat pages (P11, list and view): the user's chats with all their agents and
with each, newest first; one chat's messages with tool calls and results on one line each;
messages escaped; anonymous browsers go to the sign-in page, another user's chat is a 404."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from .chats_helpers import _agent, _bearer, _post
from .conftest import sign_in

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup", "arguments": '{"city": "Paris", "days": ' + "9" * 300 + "}"},
}
TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?\nThis week, please."},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "content": "sunny " * 100, "tool_call_id": "call_1", "name": "lookup"},
    {"role": "assistant", "content": "Sunny <b>all</b> week."},
]


def _world(client: TestClient, db: Session) -> dict[str, str]:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    agent_id = _agent(client, alice)
    first = _post(client, alice, agent_id, {"sessionId": "a", "messages": TURNS})["chatId"]
    second_agent = _agent(client, alice, "writer")
    second = _post(
        client,
        alice,
        second_agent,
        {"sessionId": "b", "messages": [{"role": "user", "content": "<script>alert(1)</script>"}]},
    )["chatId"]
    bobs_agent = _agent(client, bob, "bobs-helper")
    _post(client, bob, bobs_agent, {"sessionId": "c", "messages": [TURNS[0]]})
    return {
        "agent": agent_id,
        "chat": first,
        "writer": second_agent,
        "writer_chat": second,
        "bobs_agent": bobs_agent,
    }


def _rows(page: str) -> list[str]:
    table = re.search(r'<table id="chats">(.*?)</table>', page, re.S)
    assert table, page
    return [
        " ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in table.group(1).split("<tr>")[2:]
    ]


def test_p11_the_owner_sees_their_chats_newest_first(client: TestClient, db: Session) -> None:
    world = _world(client, db)
    sign_in(client, "alice")
    everything = client.get("/chats")
    assert everything.status_code == 200
    rows = _rows(everything.text)
    assert [row.rsplit(" ", 2)[0] for row in rows] == [
        "writer &lt;script&gt;alert(1)&lt;/script&gt; 1",
        "helper Weather in Paris? This week, please. 4",
    ]
    assert "<script>alert" not in everything.text
    assert f'href="/agents/{world["agent"]}/chats/{world["chat"]}"' in everything.text
    one_agent = client.get(f"/agents/{world['agent']}/chats")
    assert [row.rsplit(" ", 2)[0] for row in _rows(one_agent.text)] == [
        "Weather in Paris? This week, please. 4"
    ]
    home = client.get("/").text
    assert f'<a href="/agents/{world["agent"]}/chats">chats</a> · ' in home


def test_p11_a_chat_shows_its_messages_and_tool_calls_compactly(
    client: TestClient, db: Session
) -> None:
    world = _world(client, db)
    sign_in(client, "alice")
    page = client.get(f"/agents/{world['agent']}/chats/{world['chat']}")
    assert page.status_code == 200
    messages = re.search(
        r'<ol id="messages" class="chat" data-agent="helper">(.*?)</ol>', page.text, re.S
    )
    assert messages
    items = [" ".join(item.split()) for item in messages.group(1).split("</li>")[:-1]]
    arguments = CALL["function"]["arguments"]  # type: ignore[index]
    line = arguments[:119] + "…"
    assert items == [
        '<li class="message user"> <div class="role">You</div> '
        '<div class="content"><p>Weather in Paris?<br> This week, please.</p> </div>',
        '<li class="message assistant"> <div class="role">helper</div> '
        f'<details class="tool-call"><summary>lookup({line.replace(chr(34), "&#34;")})</summary>'
        f"<pre>{arguments.replace(chr(34), '&#34;')}</pre></details>",
        '<li class="message tool"> <div class="role">tool · lookup</div> '
        '<details class="tool-result"><summary>result: '
        + ("sunny " * 34)[:199]
        + "…</summary><pre>"
        + "sunny " * 100
        + "</pre></details>",
        '<li class="message assistant"> <div class="role">helper</div> '
        '<div class="content"><p>Sunny &lt;b&gt;all&lt;/b&gt; week.</p> </div>',
    ]
    assert '<section id="continue-chat">' in page.text


def test_p11_html_in_messages_is_shown_as_text(client: TestClient, db: Session) -> None:
    world = _world(client, db)
    sign_in(client, "alice")
    page = client.get(f"/agents/{world['writer']}/chats/{world['writer_chat']}").text
    assert '<div class="content"><p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n</div>' in page
    assert "<script>" not in page
    assert (
        "<title>&lt;script&gt;alert(1)&lt;/script&gt; · writer · webagents portal</title>" in page
    )


def test_p11_another_users_chats_are_404_pages(client: TestClient, db: Session) -> None:
    world = _world(client, db)
    sign_in(client, "bob")
    for path in [
        f"/agents/{world['agent']}/chats",
        f"/agents/{world['agent']}/chats/{world['chat']}",
        f"/agents/{world['bobs_agent']}/chats/{world['chat']}",
        "/agents/not-a-uuid/chats",
        f"/agents/{world['bobs_agent']}/chats/not-a-uuid",
    ]:
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["content-type"].startswith("text/html")
        assert "Weather" not in answer.text
    rows = _rows(client.get("/chats").text)
    assert [row.rsplit(" ", 2)[0] for row in rows] == [
        "bobs-helper Weather in Paris? This week, please. 1"
    ]


def test_p11_chat_pages_send_anonymous_browsers_to_sign_in(client: TestClient, db: Session) -> None:
    world = _world(client, db)
    for path in ["/chats", f"/agents/{world['agent']}/chats/{world['chat']}"]:
        answer = client.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/signin?next=%2F")
    with_key = client.get("/chats", headers={"Authorization": "Bearer rok_x"})
    assert with_key.status_code == 303  # the pages are for browsers, not for API keys
