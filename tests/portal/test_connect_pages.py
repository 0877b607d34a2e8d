"""Portal Connect on the owner's pages (P11, P12), in the app: the allowOthers toggle and the
chat box's POST need the page's CSRF token and the owner; another user's agent or chat is the
404 page; an agent without a connection is an error event that says what to run."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from .chats_helpers import _agent, _bearer, _post
from .conftest import csrf_of, sign_in


def _world(client: TestClient, db: Session) -> dict[str, str]:
    alice, _bob = _bearer(db, "alice"), _bearer(db, "bob")
    agent_id = _agent(client, alice)
    chat = _post(
        client, alice, agent_id, {"sessionId": "s", "messages": [{"role": "user", "content": "Hi"}]}
    )["chatId"]
    return {"agent": agent_id, "chat": chat, "alice": alice["Authorization"]}


def test_p12_allow_others_toggle_needs_csrf_and_the_owner(
    client: TestClient, other_client: TestClient, db: Session
) -> None:
    world = _world(client, db)
    sign_in(client, "alice")
    page = client.get(f"/agents/{world['agent']}/chats")
    assert 'id="allow-others"' in page.text and "checked" not in page.text
    token = csrf_of(page.text)
    forged = client.post(f"/agents/{world['agent']}/connect", data={"allow_others": "on"})
    assert forged.status_code == 403
    sign_in(other_client, "bob")
    bobs_token = csrf_of(other_client.get("/").text)
    foreign = other_client.post(
        f"/agents/{world['agent']}/connect",
        data={"allow_others": "on", "csrf_token": bobs_token},
    )
    assert foreign.status_code == 404
    saved = client.post(
        f"/agents/{world['agent']}/connect", data={"allow_others": "on", "csrf_token": token}
    )
    assert (saved.status_code, saved.headers["location"]) == (
        303,
        f"/agents/{world['agent']}/chats",
    )
    agent = client.get(
        f"/api/agents/{world['agent']}", headers={"Authorization": world["alice"]}
    ).json()["agent"]
    assert agent["allowOthers"] is True
    assert re.search(
        r'id="allow-others" name="allow_others" checked',
        client.get(f"/agents/{world['agent']}/chats").text,
    )
    client.post(f"/agents/{world['agent']}/connect", data={"csrf_token": token})
    agent = client.get(
        f"/api/agents/{world['agent']}", headers={"Authorization": world["alice"]}
    ).json()["agent"]
    assert agent["allowOthers"] is False


def test_p11_chat_box_on_the_owners_chat_page(client: TestClient, db: Session) -> None:
    world = _world(client, db)
    sign_in(client, "alice")
    page = client.get(f"/agents/{world['agent']}/chats/{world['chat']}")
    assert page.status_code == 200
    action = f"/agents/{world['agent']}/chats/{world['chat']}/continue"
    assert f'<form id="continue-form" method="post" action="{action}">' in page.text
    assert '<script src="/connect/chat.js" defer></script>' in page.text
    policy = page.headers["content-security-policy"]
    assert policy.endswith("; script-src 'self'; connect-src 'self'")
    assert "script-src" not in client.get("/").headers["content-security-policy"]
    script = client.get("/connect/chat.js")
    assert script.headers["content-type"].startswith("text/javascript")
    # Text goes in as text; the one HTML is the finished answer the portal sanitized.
    assert "textContent" in script.text
    assert re.findall(r".*innerHTML.*", script.text) == [
        "            this.reply.innerHTML = message.html;"
    ]


def test_p11_chat_box_post_needs_csrf_the_owner_and_a_connection(
    client: TestClient, other_client: TestClient, db: Session
) -> None:
    world = _world(client, db)
    sign_in(client, "alice")
    path = f"/agents/{world['agent']}/chats/{world['chat']}"
    token = csrf_of(client.get(path).text)
    forged = client.post(f"{path}/continue", data={"message": "Hello"})
    assert forged.status_code == 403
    sign_in(other_client, "bob")
    bobs_token = csrf_of(other_client.get("/").text)
    foreign = other_client.post(
        f"{path}/continue", data={"message": "Hello", "csrf_token": bobs_token}
    )
    assert foreign.status_code == 404
    anonymous = TestClient(client.app, follow_redirects=False)
    assert anonymous.post(f"{path}/continue", data={"message": "Hi"}).status_code == 303
    empty = client.post(f"{path}/continue", data={"message": "  ", "csrf_token": token})
    assert (empty.status_code, empty.text) == (
        400,
        'data: {"error": "write a message before sending it"}\n\n',
    )
    offline = client.post(f"{path}/continue", data={"message": "Hello", "csrf_token": token})
    assert (offline.status_code, offline.headers["content-type"]) == (
        503,
        "text/event-stream; charset=utf-8",
    )
    assert offline.text == (
        'data: {"error": "the agent \'helper\' is not connected to the portal now: its owner '
        "must run `webagents serve` (or `webagents daemon`) in the agent's published "
        'folder"}\n\n'
    )
    messages = client.get(
        f"/api/agents/{world['agent']}/conversations/{world['chat']}",
        headers={"Authorization": world["alice"]},
    ).json()["messages"]
    assert messages == [{"role": "user", "content": "Hi"}]
