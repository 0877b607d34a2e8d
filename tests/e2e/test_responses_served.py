"""Issue 24: OpenAI's Responses API on a real `webagents serve`, driven by the official client:
kept conversations per caller, streaming, refusals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.openai_callers import caller
from webagents.model import ModelRequest
from webagents.sessions.store import caller_hash
from webagents.testing import FunctionModel, Reply, ScriptedServer

from .conftest import child_env
from .serving import Process, running, write

pytestmark = pytest.mark.e2e

KEYS = {"ALICE_KEY": "alice-key-123", "BOB_KEY": "bob-key-123", "OWNER_KEY": "owner-key-123"}


def _heard(request: ModelRequest) -> Reply:
    """Every user message the model heard, and the system prompt's first line."""
    said = [m["content"] for m in request.messages if m["role"] == "user"]
    first = request.messages[0]["content"].splitlines()[0]
    return Reply(f"[{first}] heard: " + " | ".join(said))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Process, ScriptedServer, Path]]:
    folder = tmp_path / "keeper"
    write(
        folder / "AGENT.md",
        """---
name: keeper
model: openai/m
skills:
  - session
access:
  owner: env:OWNER_KEY
  keys:
    alice@example.com: env:ALICE_KEY
    bob@example.com: env:BOB_KEY
---
Keep each caller's conversations.
""",
    )
    with ScriptedServer(FunctionModel(_heard)) as model_server:
        env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url, **KEYS)
        with running(["serve", str(folder)], env) as process:
            yield process, model_server, Path(env["WEBAGENTS_HOME"])


def _client(process: Process, key: str | None, base: str = "/v1") -> openai.OpenAI:
    return caller(f"{process.url}{base}", key or "anonymous", max_retries=0)


PROMPT = "[Keep each caller's conversations.]"


def test_responses_create_and_continue_with_previous_response_id(
    served: tuple[Process, ScriptedServer, Path],
) -> None:
    process, model_server, _ = served
    client = _client(process, KEYS["ALICE_KEY"])
    first = client.responses.create(model="keeper", input="one", instructions="be brief")
    assert first.id.startswith("resp_")
    assert first.status == "completed"
    assert first.output_text == (
        f"{PROMPT} heard: [The caller's own instructions for this turn; it is the caller's "
        "text, not the agent's]\nbe brief | one"
    )
    assert first.conversation is not None and first.conversation.id.startswith("conv_")
    assert first.usage is not None and first.usage.input_tokens >= 0
    system_prompt = model_server.bodies[-1]["messages"][0]

    second = client.responses.create(model="keeper", input="two", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.conversation == first.conversation
    assert second.output_text.endswith("be brief | one | two")
    assert model_server.bodies[-1]["messages"][0] == system_prompt  # R5: byte-identical

    fetched = client.responses.retrieve(second.id)
    assert (fetched.id, fetched.output_text, fetched.previous_response_id) == (
        second.id,
        second.output_text,
        first.id,
    )
    assert [i.content[0].text for i in client.responses.input_items.list(second.id)] == ["two"]  # type: ignore[union-attr]

    # Continuing from a response that is no longer the latest would branch: refused, naming
    # the latest one.
    with pytest.raises(openai.ConflictError) as conflict:
        client.responses.create(model="keeper", input="three", previous_response_id=first.id)
    assert f"previous_response_id='{second.id}'" in conflict.value.message

    # Bob names alice's ids: exactly as unknown ones.
    bob = _client(process, KEYS["BOB_KEY"])
    for call in (
        lambda: bob.responses.retrieve(second.id),
        lambda: bob.responses.create(model="keeper", input="x", previous_response_id=second.id),
        lambda: bob.conversations.retrieve(first.conversation.id),  # type: ignore[union-attr]
    ):
        with pytest.raises(openai.NotFoundError) as missing:
            call()
        assert missing.value.status_code == 404
    unknown = second.id.replace(second.id[-4:], "zzzz")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unknown)

    client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    assert client.responses.retrieve(first.id).output_text == first.output_text


def test_responses_stream_events_in_order(served: tuple[Process, ScriptedServer, Path]) -> None:
    process, _, _ = served
    client = _client(process, KEYS["OWNER_KEY"])
    with client.responses.stream(model="keeper", input="streamed") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert final.output_text == f"{PROMPT} heard: streamed"
    assert client.responses.retrieve(final.id).output_text == final.output_text
    # The same under /agents/<name>/ (the daemon's paths; serve answers them too).
    under = _client(process, KEYS["OWNER_KEY"], "/agents/keeper")
    again = under.responses.create(input="again", previous_response_id=final.id)
    assert again.output_text == f"{PROMPT} heard: streamed | again"


def test_responses_conversations_create_items_delete(
    served: tuple[Process, ScriptedServer, Path],
) -> None:
    process, _, home = served
    client = _client(process, KEYS["ALICE_KEY"])
    made = client.conversations.create(items=[{"role": "user", "content": "earlier"}])
    assert made.object == "conversation"
    reply = client.responses.create(model="keeper", input="now", conversation=made.id)
    assert reply.output_text == f"{PROMPT} heard: earlier | now"
    assert client.conversations.retrieve(made.id).id == made.id
    items = client.conversations.items.list(made.id, order="asc")
    assert [(i.role, i.content[0].text) for i in items] == [  # type: ignore[union-attr]
        ("user", "earlier"),
        ("user", "now"),
        ("assistant", reply.output_text),
    ]
    kept = home / "sessions"
    alice = f"callers/{caller_hash('caller:alice@example.com')}/{made.id}.json"
    assert [str(p.relative_to(p.parents[3])) for p in kept.rglob(f"{made.id}.json")] == [
        f"keeper/{alice}"
    ]
    assert client.conversations.delete(made.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(made.id)


def test_responses_anonymous_is_answered_and_not_kept(
    served: tuple[Process, ScriptedServer, Path],
) -> None:
    process, _, home = served
    client = _client(process, None)
    reply = client.responses.create(model="keeper", input="hello")
    assert reply.output_text == f"{PROMPT} heard: hello"
    with httpx.Client() as http:
        body = http.post(
            f"{process.url}/v1/responses", json={"model": "keeper", "input": "hello"}
        ).json()
    assert (body["store"], body["conversation"]) == (False, None)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(reply.id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.create()
    assert "kept only for verified callers" in refused.value.message
    assert not (home / "sessions").exists()


def test_responses_refusals_are_openai_shaped(
    served: tuple[Process, ScriptedServer, Path],
) -> None:
    process, _, _ = served
    with pytest.raises(openai.AuthenticationError):
        _client(process, "forged-key").responses.create(model="keeper", input="hi")
    url = f"{process.url}/v1/responses"
    auth = {"Authorization": f"Bearer {KEYS['ALICE_KEY']}"}
    cases = {
        "no input": {"model": "keeper"},
        "tools": {"model": "keeper", "input": "hi", "tools": [{"type": "web_search"}]},
        "image": {
            "model": "keeper",
            "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
        },
        "both ids": {
            "model": "keeper",
            "input": "hi",
            "previous_response_id": "resp_x",
            "conversation": "c",
        },
    }
    with httpx.Client() as http:
        answers = {name: http.post(url, json=body, headers=auth) for name, body in cases.items()}
    for name, answer in answers.items():
        assert answer.status_code == 400, name
        error = answer.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, name
        assert error["type"] == "invalid_request_error", name


def _keeper_file(name: str) -> str:
    return f"""---
name: {name}
model: openai/m
skills:
  - session
access:
  keys:
    alice@example.com: env:ALICE_KEY
    bob@example.com: env:BOB_KEY
---
I am {name}.
"""


def test_responses_under_the_daemon_per_agent(tmp_path: Path) -> None:
    root = tmp_path / "agents"
    write(root / "alpha" / "AGENT.md", _keeper_file("alpha"))
    write(root / "beta" / "AGENT.md", _keeper_file("beta"))
    with ScriptedServer(FunctionModel(_heard)) as model_server:
        env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url, **KEYS)
        with running(["daemon", str(root)], env) as process:
            alpha = _client(process, KEYS["ALICE_KEY"], "/agents/alpha")
            first = alpha.responses.create(input="one")
            second = alpha.responses.create(input="two", previous_response_id=first.id)
            assert second.output_text == "[I am alpha.] heard: one | two"
            # At /v1, `model` picks the agent, as for Chat Completions.
            at_v1 = _client(process, KEYS["ALICE_KEY"]).responses.create(model="beta", input="hi")
            assert at_v1.output_text == "[I am beta.] heard: hi"
            # A response id is its agent's: beta knows none of alpha's.
            beta = _client(process, KEYS["ALICE_KEY"], "/agents/beta")
            with pytest.raises(openai.NotFoundError):
                beta.responses.retrieve(second.id)
            with pytest.raises(openai.NotFoundError):
                _client(process, KEYS["BOB_KEY"], "/agents/alpha").responses.retrieve(second.id)
            assert alpha.responses.retrieve(second.id).output_text == second.output_text
