"""SPEC P5 over HTTP at /api/storage/memory-scoped, on SQLite and PostgreSQL: every action
with its exact shapes, and its refusals (no key, a bad key, a user's key or token, another
agent's key and agentId, bad names, stale hashes, sizes)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.db.tables import MemoryVersion
from webagents.portal.settings import PortalSettings

from .memory_helpers import Published, SynonymEmbedder, publish
from .store_api_helpers import (
    URL,
    store_client,
)


@pytest.fixture
def embedder() -> SynonymEmbedder:
    return SynonymEmbedder()


AT = "2026-11-01T12:00:00Z"


@pytest.fixture
def api(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[TestClient]:
    with store_client(settings, migrated_engine, db, None) as client:
        yield client


def _put(api: TestClient, agent: Published, **body: Any) -> Any:
    return api.put(URL, headers=agent.headers, json=body)


def _error(answer: Any) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


def _entry(agent: Published, namespace: str, key: str, content: str, **more: Any) -> dict[str, Any]:
    from webagents.portal.memory.service import sha256_of

    shown = {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{agent.scope.agent_id}\n{namespace}\n{key}")),
        "namespace": namespace,
        "key": key,
        "content": content,
        "description": "",
        "source": "",
        "created_at": AT,
        "updated_at": AT,
        "content_sha256": sha256_of(content),
    }
    shown.update(more)
    return shown


def test_p5_put_get_list_and_delete_over_http(api: TestClient, db: Session) -> None:
    agent = publish(db)
    put = _put(
        api,
        agent,
        agentId=str(agent.scope.agent_id),
        namespace="caller:bob",
        key="prefs",
        content="likes green tea",
        description="bob's tastes",
        source="agent",
        at=AT,
    )
    expected = _entry(
        agent, "caller:bob", "prefs", "likes green tea", description="bob's tastes", source="agent"
    )
    assert (put.status_code, put.json()) == (200, {"entry": expected})
    got = api.get(
        URL,
        headers=agent.headers,
        params={"action": "get", "namespace": "caller:bob", "key": "prefs"},
    )
    assert got.json() == {"entry": expected}
    _put(api, agent, namespace="owner", key="plan", content="ship it", source="sync", at=AT)
    _put(api, agent, namespace="owner", key="plan-b", content="wait", source="agent", at=AT)
    listed = api.get(
        URL,
        headers=agent.headers,
        params={"action": "list", "namespace": ["owner", "caller:bob"], "limit": 10},
    )
    assert sorted(e["key"] for e in listed.json()["entries"]) == ["plan", "plan-b", "prefs"]
    only = api.get(
        URL,
        headers=agent.headers,
        params={"action": "list", "namespace": "owner", "prefix": "plan", "excludeSource": "sync"},
    )
    assert only.json() == {"entries": [_entry(agent, "owner", "plan-b", "wait", source="agent")]}
    gone = api.delete(URL, headers=agent.headers, params={"namespace": "owner", "key": "plan"})
    assert gone.json() == {"forgotten": True}
    again = api.delete(URL, headers=agent.headers, params={"namespace": "owner", "key": "plan"})
    assert again.json() == {"forgotten": False}
    missing = api.get(
        URL, headers=agent.headers, params={"action": "get", "namespace": "owner", "key": "plan"}
    )
    assert missing.json() == {"entry": None}


def test_p5_at_null_is_the_portals_time(api: TestClient, db: Session) -> None:
    agent = publish(db)
    entry = _put(api, agent, namespace="owner", key="now", content="x", at=None).json()["entry"]
    assert entry["created_at"] == entry["updated_at"]
    assert entry["created_at"].startswith("20")


def test_p5_no_key_a_bad_key_a_users_key_and_token_are_401(api: TestClient, db: Session) -> None:
    agent = publish(db)
    user_key = accounts.create_key(db, agent.owner, "cli").key
    token = api.post(
        "/api/auth/cli/token", headers={"Authorization": f"Bearer {user_key}"}, json={}
    ).json()["access_token"]
    params = {"action": "get", "namespace": "owner", "key": "plan"}
    assert _error(api.get(URL, params=params)) == (401, "unauthorized")
    bad = api.get(URL, params=params, headers={"Authorization": "Bearer rok_nope"})
    assert _error(bad) == (401, "unauthorized")
    assert "agent key is unknown" in bad.json()["error"]["message"]
    for credential in (user_key, token):
        refused = api.get(URL, params=params, headers={"Authorization": f"Bearer {credential}"})
        assert _error(refused) == (401, "agent_key_required")
        assert "needs an agent key" in refused.json()["error"]["message"]
        assert refused.headers["www-authenticate"] == "Bearer"
    put = api.put(
        URL,
        headers={"Authorization": f"Bearer {user_key}"},
        json={"namespace": "owner", "key": "x", "content": "y"},
    )
    assert _error(put) == (401, "agent_key_required")
    assert db.scalar(select(func.count()).select_from(MemoryVersion)) == 0


def test_p5_another_agents_key_reaches_only_its_own_store(api: TestClient, db: Session) -> None:
    mine = publish(db)
    theirs = publish(db, owner="bob", agent="other")
    _put(api, mine, namespace="owner", key="secret", content="mine only")
    params = {"action": "get", "namespace": "owner", "key": "secret"}
    assert api.get(URL, headers=theirs.headers, params=params).json() == {"entry": None}
    listed = api.get(URL, headers=theirs.headers, params={"action": "list", "namespace": "owner"})
    assert listed.json() == {"entries": []}
    synced = api.get(URL, headers=theirs.headers, params={"action": "sync"})
    assert synced.json() == {"lines": [], "cursor": "0", "more": False}
    gone = api.delete(URL, headers=theirs.headers, params={"namespace": "owner", "key": "secret"})
    assert gone.json() == {"forgotten": False}
    named = api.get(
        URL, headers=theirs.headers, params={**params, "agentId": str(mine.scope.agent_id)}
    )
    assert _error(named) == (403, "agent_mismatch")
    assert "reaches its memory only" in named.json()["error"]["message"]
    in_body = _put(
        api, theirs, agentId=str(mine.scope.agent_id), namespace="owner", key="x", content="y"
    )
    assert _error(in_body) == (403, "agent_mismatch")
    assert api.get(URL, headers=mine.headers, params=params).json()["entry"]["content"] == (
        "mine only"
    )


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"namespace": "people", "key": "a", "content": "x"}, 400, "bad_namespace"),
        ({"namespace": "owner", "key": "A B", "content": "x"}, 400, "bad_key"),
        ({"namespace": "owner", "key": "a", "content": "x" * 1_000_001}, 413, "too_large"),
        ({"namespace": "owner", "key": "a", "content": "x", "at": "2026-01-01T00:00"}, 400, None),
        ({"namespace": "owner", "key": "a", "content": "x", "extra": 1}, 400, None),
        ({"namespace": "owner", "key": "a"}, 400, None),
    ],
)
def test_p5_bad_writes_are_refused_with_what_to_fix(
    api: TestClient, db: Session, body: dict[str, Any], status: int, code: str | None
) -> None:
    agent = publish(db)
    answer = _put(api, agent, **body)
    assert answer.status_code == status, answer.text
    if code is not None:
        assert answer.json()["error"]["code"] == code
    assert db.scalar(select(func.count()).select_from(MemoryVersion)) == 0


def test_p5_a_stale_content_sha256_is_409_and_changes_nothing(api: TestClient, db: Session) -> None:
    agent = publish(db)
    first = _put(api, agent, namespace="owner", key="n", content="one", at=AT).json()["entry"]
    stale = _put(api, agent, namespace="owner", key="n", content="two", content_sha256="0" * 64)
    assert _error(stale) == (409, "stale_content")
    exists = _put(api, agent, namespace="owner", key="n", content="two", content_sha256="")
    assert _error(exists) == (409, "stale_content")
    deleted = api.delete(
        URL,
        headers=agent.headers,
        params={"namespace": "owner", "key": "n", "content_sha256": "0" * 64},
    )
    assert _error(deleted) == (409, "stale_content")
    now = api.get(
        URL, headers=agent.headers, params={"action": "get", "namespace": "owner", "key": "n"}
    )
    assert now.json() == {"entry": first}
    fresh = _put(
        api,
        agent,
        namespace="owner",
        key="n",
        content="two",
        content_sha256=first["content_sha256"],
    )
    assert fresh.json()["entry"]["content"] == "two"


def test_p5_sync_pushes_lines_and_pages_changes_by_cursor(api: TestClient, db: Session) -> None:
    agent = publish(db)
    lines = [
        {"op": "put", "key": f"k{n}", "content": f"note {n}", "description": "d", "at": AT}
        for n in range(5)
    ]
    lines.append({"op": "delete", "key": "k0"})
    pushed = api.post(
        URL,
        headers=agent.headers,
        params={"action": "sync"},
        json={"namespace": "caller:bob", "lines": lines},
    )
    assert pushed.json() == {"applied": 6}
    _put(api, agent, namespace="owner", key="mine", content="owner's", at=AT)
    page = api.get(
        URL,
        headers=agent.headers,
        params={"action": "sync", "namespace": "caller:bob", "since": 0, "limit": 3},
    ).json()
    assert [(line["op"], line["key"], line["cursor"]) for line in page["lines"]] == [
        ("put", "k1", "2"),
        ("put", "k2", "3"),
        ("put", "k3", "4"),
    ]
    assert (page["cursor"], page["more"]) == ("4", True)
    assert page["lines"][0] == {
        "op": "put",
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{agent.scope.agent_id}\ncaller:bob\nk1")),
        "namespace": "caller:bob",
        "key": "k1",
        "content": "note 1",
        "description": "d",
        "source": "",
        "at": AT,
        "content_sha256": page["lines"][0]["content_sha256"],
        "cursor": "2",
    }
    rest = api.get(
        URL,
        headers=agent.headers,
        params={"action": "sync", "namespace": "caller:bob", "since": page["cursor"]},
    ).json()
    assert [(line["op"], line["key"], line["content"]) for line in rest["lines"]] == [
        ("put", "k4", "note 4"),
        ("delete", "k0", None),
    ]
    assert (rest["cursor"], rest["more"]) == ("7", False)  # past owner's change too
    mixed = api.post(
        URL,
        headers=agent.headers,
        params={"action": "sync"},
        json={
            "namespace": "caller:bob",
            "lines": [
                {"op": "put", "key": "k9", "content": "x"},
                {"op": "put", "key": "k8", "content": "y", "content_sha256": "0" * 64},
            ],
        },
    )
    assert _error(mixed) == (409, "stale_content")
    after = api.get(
        URL,
        headers=agent.headers,
        params={"action": "sync", "namespace": "caller:bob", "since": 7},
    ).json()
    assert after == {"lines": [], "cursor": "7", "more": False}  # the whole push changed nothing


def test_p5_unknown_actions_and_missing_parameters_say_what_to_send(
    api: TestClient, db: Session
) -> None:
    agent = publish(db)
    cases = [
        ({"action": "frobnicate"}, "invalid_request"),
        ({"action": "get", "namespace": "owner"}, "bad_key"),
        ({"action": "get", "namespace": ["owner", "shared"], "key": "a"}, "bad_namespace"),
        ({"action": "list"}, "bad_namespace"),
        ({"action": "search", "namespace": "owner", "q": "  "}, "empty_query"),
    ]
    for params, code in cases:
        answer = api.get(URL, headers=agent.headers, params=params)
        assert _error(answer) == (400, code), params
    post = api.post(
        URL, headers=agent.headers, params={"action": "put"}, json={"namespace": "o", "lines": []}
    )
    assert _error(post) == (400, "invalid_request")


# Search: hybrid (full-text and meaning, fused by reciprocal rank).


@pytest.fixture
def semantic_api(
    settings: PortalSettings, migrated_engine: Engine, db: Session, embedder: SynonymEmbedder
) -> Iterator[TestClient]:
    with store_client(settings, migrated_engine, db, embedder) as client:
        yield client


def _search(api: TestClient, agent: Published, q: str, *namespaces: str) -> Any:
    params = {"action": "search", "q": q, "namespace": list(namespaces), "limit": 5}
    answer = api.get(URL, headers=agent.headers, params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_p5_search_finds_by_meaning_a_note_with_no_word_in_common(
    semantic_api: TestClient, db: Session, embedder: SynonymEmbedder
) -> None:
    from webagents.portal.memory.embedding_queue import embed_due

    agent = publish(db)
    notes = {
        "pets": "bob keeps a puppy at home",
        "travel": "next holiday is in june",
        "garage": "the sedan needs new tyres",
    }
    for key, content in notes.items():
        _put(semantic_api, agent, namespace="caller:bob", key=key, content=content)
    _put(semantic_api, agent, namespace="caller:carol", key="pets", content="carol has a hound")
    before = _search(semantic_api, agent, "dog", "caller:bob")
    assert before == {"entries": [], "semantic": "on"}  # not embedded yet: full-text only
    assert embed_due(db, embedder) == 4
    assert embed_due(db, embedder) == 0  # the queue is empty once each has its vector
    found = _search(semantic_api, agent, "dog", "caller:bob")
    assert [(e["key"], e["matched"]) for e in found["entries"]] == [("pets", ["meaning"])]
    assert found["semantic"] == "on"
    both = _search(semantic_api, agent, "trip to june", "caller:bob")
    assert [(e["key"], e["matched"]) for e in both["entries"]] == [("travel", ["text", "meaning"])]
    hybrid = _search(semantic_api, agent, "automobile tyres journey", "caller:bob")
    assert [(e["key"], e["matched"]) for e in hybrid["entries"]] == [
        ("garage", ["text", "meaning"]),
        ("travel", ["meaning"]),
    ]
    carol = _search(semantic_api, agent, "dog", "caller:carol")
    assert [(e["namespace"], e["key"]) for e in carol["entries"]] == [("caller:carol", "pets")]


def test_p5_search_sees_a_changed_note_after_it_is_embedded_again(
    semantic_api: TestClient, db: Session, embedder: SynonymEmbedder
) -> None:
    from webagents.portal.memory.embedding_queue import embed_due

    agent = publish(db)
    _put(semantic_api, agent, namespace="owner", key="n", content="about my puppy")
    embed_due(db, embedder)
    assert [e["key"] for e in _search(semantic_api, agent, "dog", "owner")["entries"]] == ["n"]
    _put(semantic_api, agent, namespace="owner", key="n", content="about my car")
    assert embed_due(db, embedder) == 1  # changed: due again
    assert _search(semantic_api, agent, "dog", "owner")["entries"] == []
    found = _search(semantic_api, agent, "vehicle", "owner")["entries"]
    assert [(e["key"], e["matched"]) for e in found] == [("n", ["meaning"])]
    api_delete = semantic_api.delete(
        URL, headers=agent.headers, params={"namespace": "owner", "key": "n"}
    )
    assert api_delete.json() == {"forgotten": True}
    assert _search(semantic_api, agent, "vehicle", "owner")["entries"] == []


def test_p5_search_without_embeddings_answers_full_text_and_says_semantic_is_off(
    api: TestClient, db: Session
) -> None:
    agent = publish(db)
    _put(api, agent, namespace="shared", key="faq", content="Opening hours: nine to five")
    _put(api, agent, namespace="owner", key="faq", content="opening party friday")
    answer = _search(api, agent, "opening hours", "shared")
    assert answer["semantic"] == "off"
    assert [(e["namespace"], e["key"], e["matched"]) for e in answer["entries"]] == [
        ("shared", "faq", ["text"])
    ]
    assert _search(api, agent, "puppy", "shared") == {"entries": [], "semantic": "off"}


def test_p5_full_text_follows_every_change_of_a_note(api: TestClient, db: Session) -> None:
    agent = publish(db)

    def keys(q: str) -> list[str]:
        return [e["key"] for e in _search(api, agent, q, "owner")["entries"]]

    _put(api, agent, namespace="owner", key="n", content="alpha words")
    assert (keys("alpha"), keys("beta")) == (["n"], [])
    _put(api, agent, namespace="owner", key="n", content="beta words")
    assert (keys("alpha"), keys("beta")) == ([], ["n"])
    api.delete(URL, headers=agent.headers, params={"namespace": "owner", "key": "n"})
    assert keys("beta") == []
    _put(api, agent, namespace="owner", key="n", content="beta again", description="gamma")
    assert (keys("beta"), keys("gamma"), keys("n")) == (["n"], ["n"], ["n"])


def test_p5_search_keeps_to_the_asked_namespaces_whatever_their_characters(
    api: TestClient, db: Session
) -> None:
    agent = publish(db)
    odd = ['caller:o"brien', 'caller:o"brien x', "caller:jwt:https://id.example#o'brien"]
    for namespace in odd:
        _put(api, agent, namespace=namespace, key="note", content=f"tea for {namespace}")
    for namespace in odd:
        found = _search(api, agent, "tea", namespace)["entries"]
        assert [e["namespace"] for e in found] == [namespace]
    both = _search(api, agent, "tea", odd[0], odd[2])["entries"]
    assert sorted(e["namespace"] for e in both) == sorted([odd[0], odd[2]])


def test_p5_search_of_many_namespaces_keeps_to_the_asked_ones(api: TestClient, db: Session) -> None:
    """More namespaces than FTS5 is narrowed by (the owner's or an agent's search of all its
    callers) are kept to exactly, after the full-text match."""
    from webagents.portal.memory.search import FTS_NAMESPACE_PHRASES

    agent = publish(db)
    every = [f"caller:user{n}" for n in range(FTS_NAMESPACE_PHRASES + 4)]
    for namespace in every:
        _put(api, agent, namespace=namespace, key="note", content=f"tea for {namespace}")
    asked = every[:-2]
    params = {"action": "search", "q": "tea", "namespace": asked, "limit": 50}
    answer = api.get(URL, headers=agent.headers, params=params)
    assert answer.status_code == 200, answer.text
    assert sorted(e["namespace"] for e in answer.json()["entries"]) == sorted(asked)
