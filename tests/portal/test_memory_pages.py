"""The owner's memory pages (SPEC P8, P6) through the real HTTP app, on SQLite and
PostgreSQL: namespaces (callers labelled, identities shown safely), an entry edited with the
hash its page showed (a stale one is a conflict that loses nothing), forget, restore, export
in both formats, retention; every form refused without its CSRF token; another user gets a
404 on every page and form; anonymous is sent to sign in."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from webagents.notes.store import NoteStore
from webagents.portal.app import create_app
from webagents.portal.db.requests import read_request_session, request_session
from webagents.portal.memory import retention, service
from webagents.portal.memory.embedding_queue import embed_due
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.memory.retention import Rule
from webagents.portal.settings import PortalSettings

from .conftest import form_token, make_account, sign_in
from .export_helpers import _unzip
from .memory_entries_helpers import AT, _agent, _commit, _put
from .memory_helpers import Published, SynonymEmbedder, publish
from .memory_pages_helpers import forms, table

LOOKALIKE = "caller:b\u043eb"  # a Cyrillic o: not bob


def test_p8_the_owner_sees_the_memory_by_namespace_callers_labelled_and_shown_safely(
    client: TestClient, db: Session
) -> None:
    published, store, base = _agent(db, client)
    _put(store, "owner", "plan", "launch in March", "the plan")
    _put(store, "shared", "faq", "opening hours 9-5")
    _put(store, "caller:bob", "prefs", "tea")
    _put(store, "caller:bob", "name", "Bob")
    _put(store, LOOKALIKE, "prefs", "coffee")
    retention.set_rule(MemoryStore.for_agent(db, published.scope), "caller:*", 30)

    page = client.get(base)
    assert page.status_code == 200
    at = AT.strftime("%Y-%m-%d %H:%M")
    assert table(page.text, "namespaces") == [
        ["Namespace", "Whose", "Entries", "Forgotten", "Last change (UTC)", "Last 30 days", "Kept"],
        ["owner", "owner", "1", "0", at, "", "forever"],
        ["shared", "shared", "1", "0", at, "", "forever"],
        ["caller:bob", "caller", "2", "0", at, "", "30 days"],
        ["caller:b\\u043eb (#" + _digest(LOOKALIKE) + ")", "caller", "1", "0", at, "", "30 days"],
    ]
    listing = client.get(f"{base}/namespace", params={"namespace": "caller:bob"})
    assert "<hgroup><h1>caller:bob</h1><p>One caller's notes</p></hgroup>" in listing.text
    assert [row[:2] for row in table(listing.text, "entries")] == [
        ["Key", "Description"],
        ["name", ""],
        ["prefs", ""],
    ]


def _digest(identity: str) -> str:
    import hashlib

    return hashlib.sha256(identity.encode()).hexdigest()[:8]


@pytest.fixture
def semantic_client(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> Iterator[TestClient]:
    """A browser on an app whose store embeds with the synonym embedder (no worker: the
    test works the queue)."""
    app = create_app(
        settings, engine=migrated_engine, embedder=SynonymEmbedder(), embedding_worker=False
    )

    def test_session() -> Iterator[Session]:
        try:
            yield db
        except BaseException:
            db.rollback()
            raise
        db.commit()

    app.dependency_overrides[request_session] = test_session
    app.dependency_overrides[read_request_session] = test_session
    with TestClient(app, follow_redirects=False) as browser:
        yield browser


def test_p8_search_finds_by_meaning_and_by_words_across_the_namespaces(
    semantic_client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, semantic_client)
    _put(store, "caller:bob", "pet", "my hound loves long walks", "bob's animal")
    _put(store, "owner", "insurance", "the sedan insurance is due in May", "insurance")
    _put(store, "shared", "hours", "open nine to five")
    assert embed_due(db, SynonymEmbedder()) == 3
    by_meaning = semantic_client.get(f"{base}/search", params={"q": "puppy"})
    assert by_meaning.status_code == 200
    assert 'id="semantic-off"' not in by_meaning.text
    assert table(by_meaning.text, "hits") == [
        ["Namespace", "Whose", "Key", "Description", "Found by"],
        ["caller:bob", "caller", "pet", "bob's animal", "meaning"],
    ]
    both = semantic_client.get(f"{base}/search", params={"q": "automobile insurance"})
    assert table(both.text, "hits")[1:] == [
        ["owner", "owner", "insurance", "insurance", "words and meaning"]
    ]


def test_p8_search_without_embeddings_says_semantic_search_is_off(
    client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "caller:bob", "pet", "my hound loves long walks", "bob's animal")
    page = client.get(f"{base}/search", params={"q": "hound"})
    assert (
        '<p id="semantic-off" class="notice">Semantic search is off on this portal (it runs '
        "with <code>--embeddings none</code>): these are full-text matches only.</p>"
    ) in page.text
    assert table(page.text, "hits")[1:] == [
        ["caller:bob", "caller", "pet", "bob's animal", "words"]
    ]
    nothing = client.get(f"{base}/search", params={"q": "puppy"})
    assert '<p id="no-hits">Nothing found for “puppy”.</p>' in nothing.text
    no_words = client.get(f"{base}/search", params={"q": "?!"})
    assert no_words.status_code == 400
    assert '<p class="error" role="alert">type one or more words to search for</p>' in (
        no_words.text
    )


def _edit_form(client: TestClient, base: str, namespace: str, key: str) -> dict[str, str]:
    page = client.get(f"{base}/entry", params={"namespace": namespace, "key": key})
    assert page.status_code == 200, page.text
    (found,) = forms(page.text, "/memory/entry")
    return found


def test_p8_the_owner_edits_an_entry_with_the_hash_the_page_showed(
    client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "caller:bob", "prefs", "tea\n", "what bob likes")
    fields = _edit_form(client, base, "caller:bob", "prefs")
    assert {k: v for k, v in fields.items() if k != "csrf_token"} == {
        "namespace": "caller:bob",
        "key": "prefs",
        "content_sha256": service.sha256_of("tea\n"),
        "description": "what bob likes",
        "content": "tea\n",
    }
    saved = client.post(
        f"{base}/entry", data={**fields, "content": "tea, no sugar\r\nand biscuits"}
    )
    assert (saved.status_code, saved.headers["location"]) == (
        303,
        f"{base}/entry?namespace=caller%3Abob&key=prefs",
    )
    entry = service.get(store, "caller:bob", "prefs")
    assert entry is not None
    assert (entry.content, entry.description, entry.source) == (
        "tea, no sugar\nand biscuits",
        "what bob likes",
        "portal",
    )
    assert [(v.op, v.by) for v in service.versions(store, "caller:bob", "prefs")] == [
        ("put", "owner:alice"),
        ("put", "agent"),
    ]


def test_p8_an_edit_of_an_entry_changed_meanwhile_is_a_conflict_that_loses_nothing(
    client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "owner", "plan", "March")
    fields = _edit_form(client, base, "owner", "plan")
    _put(store, "owner", "plan", "April (the agent's edit)")
    answer = client.post(f"{base}/entry", data={**fields, "content": "May (the owner's edit)"})
    assert answer.status_code == 409
    assert (
        "this entry was changed since you opened it (by the agent, or on another page), so "
        "your edit was not saved"
    ) in answer.text
    entry = service.get(store, "owner", "plan")
    assert entry is not None and entry.content == "April (the agent's edit)"
    again = forms(answer.text, "/memory/entry")[0]
    assert (again["content"], again["content_sha256"]) == (
        "May (the owner's edit)",
        entry.content_sha256,
    )
    assert client.post(f"{base}/entry", data=again).status_code == 303
    assert [v.content for v in service.versions(store, "owner", "plan")] == [
        "May (the owner's edit)",
        "April (the agent's edit)",
        "March",
    ]


def test_p8_a_bad_edit_is_shown_on_the_page_and_changes_nothing(
    client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "owner", "plan", "March")
    fields = _edit_form(client, base, "owner", "plan")
    answer = client.post(f"{base}/entry", data={**fields, "description": "two\nlines"})
    assert answer.status_code == 400
    assert "a description is one line of at most 1000 characters" in answer.text
    assert [v.content for v in service.versions(store, "owner", "plan")] == ["March"]


def test_p8_forget_removes_the_entry_and_syncs_a_delete(client: TestClient, db: Session) -> None:
    _, store, base = _agent(db, client)
    _put(store, "caller:bob", "prefs", "tea")
    cursor = service.changes(store, None, 0).cursor
    page = client.get(f"{base}/forget", params={"namespace": "caller:bob", "key": "prefs"})
    (fields,) = forms(page.text, "/memory/forget")
    answer = client.post(f"{base}/forget", data=fields)
    assert (answer.status_code, answer.headers["location"]) == (
        303,
        f"{base}/namespace?namespace=caller%3Abob",
    )
    assert service.get(store, "caller:bob", "prefs") is None
    lines = service.changes(store, None, cursor).lines
    assert [(line.op, line.namespace, line.key) for line in lines] == [
        ("delete", "caller:bob", "prefs")
    ]
    # Forgotten, not lost: its page offers the versions, and restoring the forgetting's
    # version brings the text back.
    gone = client.get(f"{base}/entry", params={"namespace": "caller:bob", "key": "prefs"})
    assert '<p id="gone">This entry is not kept now: restore one of its versions below.</p>' in (
        gone.text
    )
    assert forms(gone.text, "/memory/entry") == []
    assert _timeline(gone.text) == [
        ("forgotten", "you, on the portal", "tea"),
        ("written", "the agent", "tea"),
    ]
    first = forms(gone.text, "/memory/restore")[0]
    assert client.post(f"{base}/restore", data=first).status_code == 303
    entry = service.get(store, "caller:bob", "prefs")
    assert entry is not None and entry.content == "tea"


def _timeline(html: str) -> list[tuple[str, str, str]]:
    """An entry's versions as its page lists them, newest first: (change, by whom, text)."""
    found = re.findall(
        r'<strong class="op">([^<]*)</strong> by <span class="who">([^<]*)</span>.*?'
        r"<pre>([^<]*)</pre>",
        html.split('<ol id="versions" class="timeline">', 1)[1],
        re.S,
    )
    return [(op, who, text) for op, who, text in found]


def test_p6_restore_on_the_page_brings_back_an_overwritten_text_as_a_new_version(
    client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "owner", "plan", "the first plan", "plan v1")
    _put(store, "owner", "plan", "overwritten", "plan v2")
    cursor = service.changes(store, None, 0).cursor
    page = client.get(f"{base}/entry", params={"namespace": "owner", "key": "plan"})
    assert _timeline(page.text) == [
        ("written", "the agent", "overwritten"),
        ("written", "the agent", "the first plan"),
    ]
    restores = forms(page.text, "/memory/restore")
    assert len(restores) == 1  # the current text has nothing to restore
    answer = client.post(f"{base}/restore", data=restores[0])
    assert answer.status_code == 303
    entry = service.get(store, "owner", "plan")
    assert entry is not None
    assert (entry.content, entry.description) == ("the first plan", "plan v1")
    assert [(v.content, v.by) for v in service.versions(store, "owner", "plan")] == [
        ("the first plan", "owner:alice"),
        ("overwritten", "agent"),
        ("the first plan", "agent"),
    ]
    lines = service.changes(store, None, cursor).lines
    assert [(line.op, line.key, line.content) for line in lines] == [
        ("put", "plan", "the first plan")
    ]


def test_p8_export_on_the_page_gives_json_lines_and_a_zip_that_loads_as_notes(
    client: TestClient, db: Session, tmp_path: Path
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "owner", "plan", "launch in March\n", "the plan")
    _put(store, "caller:bob", "prefs", "tea", "what bob likes")
    _put(store, "shared", "gone", "forgotten")
    service.delete(store, "shared", "gone", by=service.BY_AGENT)

    lines = client.get(f"{base}/export.jsonl")
    assert lines.status_code == 200
    assert lines.headers["content-disposition"] == 'attachment; filename="helper-memory.jsonl"'
    assert [orjson.loads(line) for line in lines.content.splitlines()] == [
        service.get(store, ns, key).model_dump(mode="json")  # type: ignore[union-attr]
        for ns, key in [("owner", "plan"), ("caller:bob", "prefs")]
    ]

    notes = client.get(f"{base}/export.zip")
    assert notes.headers["content-type"] == "application/zip"
    root = tmp_path / "agent" / ".webagents" / "memory"
    root.mkdir(parents=True)
    _unzip(notes.content, root)
    local = NoteStore(root)
    assert local.namespaces() == ["owner", "caller:bob"]
    read = [local.read("owner", "plan"), local.read("caller:bob", "prefs")]
    assert [(n.content, n.description) for n in read if n] == [
        ("launch in March\n", "the plan"),
        ("tea", "what bob likes"),
    ]
    with zipfile.ZipFile(io.BytesIO(notes.content)) as archive:
        assert "shared/gone.md" not in archive.namelist()


def test_p6_retention_is_set_on_the_page_per_namespace_and_for_all_callers(
    client: TestClient, db: Session
) -> None:
    published, _, base = _agent(db, client)
    (fields,) = forms(client.get(base).text, "/memory/retention")
    for namespace, days in [("caller:*", "7"), ("owner", "365"), ("owner", "90")]:
        answer = client.post(
            f"{base}/retention", data={**fields, "namespace": namespace, "days": days}
        )
        assert (answer.status_code, answer.headers["location"]) == (303, base)
    assert retention.rules_of(MemoryStore.for_agent(db, published.scope)) == [
        Rule("caller:*", 7),
        Rule("owner", 90),
    ]
    page = client.get(base)
    assert table(page.text, "retention") == [
        ["Namespace", "Days", ""],
        ["all callers (caller:*)", "7", ""],
        ["owner", "90", ""],
    ]
    refused = client.post(f"{base}/retention", data={**fields, "namespace": "owner", "days": "-1"})
    assert refused.status_code == 400
    assert "retention is a whole number of days from 1 to 36500" in refused.text
    forever = forms(page.text, "/memory/retention")[1]  # "Keep forever" of owner's rule
    assert (forever["namespace"], forever["days"]) == ("owner", "")
    assert client.post(f"{base}/retention", data=forever).status_code == 303
    assert retention.rules_of(MemoryStore.for_agent(db, published.scope)) == [Rule("caller:*", 7)]


def _forms_of_the_pages(store: MemoryStore, base: str) -> list[tuple[str, dict[str, str]]]:
    version = service.versions(store, "owner", "plan")[-1].id
    return [
        (
            f"{base}/entry",
            {
                "namespace": "owner",
                "key": "plan",
                "content": "changed",
                "description": "",
                "content_sha256": service.sha256_of("March"),
            },
        ),
        (f"{base}/forget", {"namespace": "owner", "key": "plan", "confirm": "yes"}),
        (f"{base}/restore", {"version": str(version)}),
        (f"{base}/retention", {"namespace": "owner", "days": "1"}),
    ]


PAGES = [
    "",
    "/namespace?namespace=owner",
    "/entry?namespace=owner&key=plan",
    "/forget?namespace=owner&key=plan",
    "/forgotten?namespace=owner",
    "/search?q=March",
    "/export.jsonl",
    "/export.zip",
]


def _untouched(db: Session, store: MemoryStore, published: Published) -> None:
    entry = service.get(store, "owner", "plan")
    assert entry is not None and entry.content == "March"
    assert len(service.versions(store, "owner", "plan")) == 2
    assert retention.rules_of(MemoryStore.for_agent(db, published.scope)) == []


def test_p8_every_form_is_refused_without_its_csrf_token(client: TestClient, db: Session) -> None:
    published, store, base = _agent(db, client)
    _put(store, "owner", "plan", "first")
    _put(store, "owner", "plan", "March")
    for path, data in _forms_of_the_pages(store, base):
        for token in ("", "0" * 64):
            answer = client.post(path, data={**data, "csrf_token": token})
            assert answer.status_code == 403, path
            assert "this form expired or was not sent from the portal" in answer.text
    _untouched(db, store, published)


def test_p8_another_user_gets_404_on_every_memory_page_and_form(
    client: TestClient, other_client: TestClient, db: Session
) -> None:
    published, store, base = _agent(db, client)
    _put(store, "owner", "plan", "first")
    _put(store, "owner", "plan", "March")
    make_account(db, "mallory")
    sign_in(other_client, "mallory")
    token = form_token(other_client, "/keys")
    for path in PAGES:
        answer = other_client.get(base + path)
        assert (answer.status_code, "<h1>Not Found</h1>" in answer.text) == (404, True), path
        assert "March" not in answer.text
    for path, data in _forms_of_the_pages(store, base):
        answer = other_client.post(path, data={**data, "csrf_token": token})
        assert answer.status_code == 404, path
    for path in ("/agents/not-an-id/memory", "/agents/00000000-0000-0000-0000-000000000000/memory"):
        assert other_client.get(path).status_code == 404
    _untouched(db, store, published)


@pytest.mark.parametrize("path", PAGES)
def test_p8_anonymous_is_sent_to_sign_in(client: TestClient, db: Session, path: str) -> None:
    published = publish(db)
    base = f"/agents/{published.scope.agent_id}/memory"
    answer = client.get(base + path)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/signin?next=%2Fagents%2F")


def test_p8_anonymous_forms_are_sent_to_sign_in_and_change_nothing(
    client: TestClient, db: Session
) -> None:
    published = publish(db)
    store = MemoryStore.for_agent(db, published.scope)
    _put(store, "owner", "plan", "first")
    _put(store, "owner", "plan", "March")
    base = f"/agents/{published.scope.agent_id}/memory"
    token = form_token(client, "/signin")  # a real token, of an anonymous browser
    for path, data in _forms_of_the_pages(store, base):
        answer = client.post(path, data={**data, "csrf_token": token})
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/signin?next=%2Fagents%2F")
    _untouched(db, store, published)


def test_p8_the_memory_page_charts_each_namespaces_entries_over_the_last_30_days(
    client: TestClient, db: Session
) -> None:
    """One point every three days, now last: an entry counts from its writing until its
    forgetting; the chart's label says it in words."""
    _, store, base = _agent(db, client)
    now = datetime.now(UTC)

    def written(key: str, days_ago: float) -> None:
        service.put(
            store,
            namespace="owner",
            key=key,
            content=key,
            description="",
            source="agent",
            at=now - timedelta(days=days_ago),
            by=service.BY_AGENT,
        )

    written("old", 40)
    written("new", 12.5)
    written("brief", 25.5)
    service.delete(store, "owner", "brief", at=now - timedelta(days=4.5), by=service.BY_AGENT)
    _commit(store, "owner", "old")

    page = client.get(base).text
    chart = re.search(
        r'<svg class="growth" viewBox="0 0 100 20" role="img" aria-label="([^"]*)">'
        r'<polyline points="([^"]*)"',
        page,
    )
    assert chart is not None, page
    # 30, 27, ... 3, 0 days ago: old all along; brief from 24 to 6 days ago; new from 12.
    counts = [1, 1, 2, 2, 2, 2, 3, 3, 3, 2, 2]
    heights = {1: "13.0", 2: "7.0", 3: "1.0"}  # 19 - 18 * count / 3
    assert chart.groups() == (
        "1 entries 30 days ago, 2 now, at most 3",
        " ".join(f"{10 * n},{heights[count]}" for n, count in enumerate(counts)),
    )
