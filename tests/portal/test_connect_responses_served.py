"""The Responses API and Conversations through the portal's public endpoint (issue 24, SPEC
P12), all real processes: `webagents portal serve`, and `webagents serve` of an agent
published with the real CLI, connected over Portal Connect. The official `openai` client,
with `base_url=<portal>/agents/<name>`, makes, continues, streams, retrieves, lists and
deletes responses and conversations as a portal user (a caller) and as the owner, each
kept apart from the other; a bad token is a 401 and an agent that is not connected a 503,
exactly as for Chat Completions. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.e2e.conftest import child_env
from tests.e2e.serving import running

from .connect_served_helpers import _allow_others, _client, _key, _published, _ready
from .processes import Served

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): the Responses API relayed
# over Connect does not depend on the database beyond what the repository and app tests prove on
# both.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # the installed command

SAID = (
    "(offline scripted model, turn {turn}) You said: {said!r}. I can't think offline, but "
    "everything around me works: the chat, the slash commands and my skills' tools."
)


def _said(items: Sequence[BaseModel]) -> list[tuple[str, str]]:
    """Each message item's role and its one text."""
    dumped = [item.model_dump() for item in items]
    return [(d["role"], "".join(part["text"] for part in d["content"])) for d in dumped]


def _both(served: Served, name: str, key: str) -> tuple[httpx.Response, httpx.Response]:
    """The same call's answer at chat/completions and at responses."""
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{served.url}/agents/{name}"
    chat = httpx.post(
        f"{url}/chat/completions",
        headers=headers,
        json={"model": name, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    responses = httpx.post(
        f"{url}/responses", headers=headers, json={"model": name, "input": "hi"}, timeout=60
    )
    return chat, responses


def test_p12_the_responses_api_through_the_portal_keeps_each_users_conversations(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    folder, alice = _published(
        tmp_path, served, fresh_database_url, "name: helper\nskills:\n  - session"
    )
    bob = _key(tmp_path, fresh_database_url, "bob")
    _allow_others(served, alice, folder)
    offline_both = _both(served, "helper", bob)
    with _client(served, bob) as client, pytest.raises(openai.APIStatusError) as offline:
        client.responses.create(model="helper", input="hello")
    with running(["serve", str(folder), "--offline"], child_env(tmp_path)) as agent:
        _ready(agent, served)
        with _client(served, bob) as client:
            first = client.responses.create(model="helper", input="hello")
            second = client.responses.create(
                model="helper", input="again", previous_response_id=first.id
            )
            with client.responses.stream(
                model="helper", input="third", previous_response_id=second.id
            ) as s:
                deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
                streamed = s.get_final_response()
            retrieved = client.responses.retrieve(streamed.id)
            inputs = client.responses.input_items.list(streamed.id)
            made = client.conversations.create(
                items=[{"type": "message", "role": "user", "content": "from the start"}]
            )
            fetched = client.conversations.retrieve(made.id)
            in_made = client.responses.create(model="helper", input="in it", conversation=made.id)
            items = client.conversations.items.list(made.id, order="asc")
            client.responses.delete(streamed.id)
            with pytest.raises(openai.NotFoundError) as gone:
                client.responses.retrieve(streamed.id)
            after_delete = client.responses.retrieve(second.id)
        with _client(served, alice) as owner:
            owners = owner.responses.create(model="helper", input="as the owner")
            with pytest.raises(openai.NotFoundError) as bobs_for_alice:
                owner.responses.retrieve(second.id)
            with pytest.raises(openai.NotFoundError) as bobs_conversation:
                owner.conversations.retrieve(made.id)
        with _client(served, bob) as client, pytest.raises(openai.NotFoundError) as alices:
            client.responses.retrieve(owners.id)
        with (
            _client(served, "rok_not-a-key") as forged,
            pytest.raises(openai.AuthenticationError) as refused,
        ):
            forged.responses.retrieve(second.id)
        unknown = _both(served, "nobody", bob)
        forged_both = _both(served, "helper", "rok_not-a-key")
    assert (offline.value.status_code, offline.value.code) == (503, "agent_offline")
    assert _said(first.output) == [("assistant", SAID.format(turn=1, said="hello"))]
    assert (second.previous_response_id, second.conversation) == (first.id, first.conversation)
    assert "".join(deltas) == SAID.format(turn=3, said="third") == streamed.output_text
    assert (retrieved.id, retrieved.output_text) == (streamed.id, streamed.output_text)
    assert _said(inputs.data) == [("user", "third")]
    assert (fetched.id, fetched.object) == (made.id, "conversation")
    assert in_made.conversation is not None and in_made.conversation.id == made.id
    assert _said(items.data) == [
        ("user", "from the start"),
        ("user", "in it"),
        ("assistant", SAID.format(turn=2, said="in it")),
    ]
    assert (gone.value.code, after_delete.id) == ("not_found", second.id)
    assert owners.output_text == SAID.format(turn=1, said="as the owner")
    assert owners.conversation is not None and owners.conversation.id != first.conversation.id  # type: ignore[union-attr]
    for missing in (bobs_for_alice, bobs_conversation, alices):
        assert missing.value.code == "not_found", missing.value
    assert (refused.value.status_code, refused.value.code) == (401, "unauthorized")
    # Exactly as for Chat Completions: the same status and the same OpenAI-shaped error.
    for chat, responses, status in (
        (*offline_both, 503),
        (*unknown, 404),
        (*forged_both, 401),
    ):
        assert (responses.status_code, responses.json()) == (status, chat.json()), responses.text
        assert chat.status_code == status
        assert responses.headers["x-content-type-options"] == "nosniff"
