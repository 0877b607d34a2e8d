"""Forgetting on the owner's memory pages (SPEC P8, P6) through the real HTTP app, on SQLite
and PostgreSQL: a page asks before an entry is forgotten (a forget form without its
confirmation only asks, and changes nothing); each namespace's forgotten entries are listed,
to restore, until retention removes their versions. Another user's 404s and anonymous's
sign-in page for these pages and forms are in test_memory_pages.py with every other page's."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from webagents.portal.memory import retention, service
from webagents.portal.memory.repository import MemoryStore

from .conftest import form_token
from .memory_entries_helpers import AT, _agent, _commit, _put
from .memory_pages_helpers import forms, table


def _forget(store: MemoryStore, namespace: str, key: str, minutes: int) -> None:
    """Forgotten by alice on the pages, `minutes` after AT."""
    moment = AT + timedelta(minutes=minutes)
    service.delete(store, namespace, key, at=moment, by=service.by_owner("alice"))
    _commit(store, namespace, key)


def test_p8_forget_asks_on_a_page_of_its_own_then_forgets_and_syncs_a_delete(
    client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "caller:bob", "prefs", "tea")
    cursor = service.changes(store, None, 0).cursor
    entry = client.get(f"{base}/entry", params={"namespace": "caller:bob", "key": "prefs"})
    # The entry's page forgets nothing itself: it links to the page that asks.
    assert forms(entry.text, "/memory/forget") == []
    ask = f"{base}/forget?namespace=caller%3Abob&amp;key=prefs"
    assert f'<a href="{ask}" id="forget-link">Forget this entry…</a>' in entry.text
    asked = client.get(f"{base}/forget", params={"namespace": "caller:bob", "key": "prefs"})
    assert asked.status_code == 200
    assert (
        "<hgroup><h1>Forget prefs?</h1><p>in caller:bob, one caller's notes</p></hgroup>"
        in asked.text
    )
    assert '<pre id="forget-content">tea</pre>' in asked.text
    assert asked.headers["content-security-policy"].startswith("default-src 'none'; style-src")
    (fields,) = forms(asked.text, "/memory/forget")
    assert fields == {
        "csrf_token": fields["csrf_token"],
        "namespace": "caller:bob",
        "key": "prefs",
        "confirm": "yes",
    }
    assert fields["csrf_token"]
    assert service.changes(store, None, cursor).lines == []  # asking changed nothing
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


def test_p8_a_forget_form_without_its_confirmation_only_asks(
    client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "owner", "plan", "March")
    for confirm in ({}, {"confirm": ""}, {"confirm": "no"}):
        answer = client.post(
            f"{base}/forget",
            data={
                "csrf_token": form_token(client, "/keys"),
                "namespace": "owner",
                "key": "plan",
                **confirm,
            },
        )
        assert (answer.status_code, answer.headers["location"]) == (
            303,
            f"{base}/forget?namespace=owner&key=plan",
        )
    entry = service.get(store, "owner", "plan")
    assert entry is not None and entry.content == "March"
    assert [v.op for v in service.versions(store, "owner", "plan")] == ["put"]


def test_p8_the_forget_page_of_an_entry_not_kept_is_404(client: TestClient, db: Session) -> None:
    _, store, base = _agent(db, client)
    _put(store, "owner", "plan", "March")
    _forget(store, "owner", "plan", 1)
    for key in ("plan", "never"):
        answer = client.get(f"{base}/forget", params={"namespace": "owner", "key": key})
        assert answer.status_code == 404
        assert f"owner keeps no entry &#39;{key}&#39; now: nothing to forget" in answer.text
    bad = client.get(f"{base}/forget", params={"namespace": "nobody", "key": "plan"})
    assert bad.status_code == 400


def test_p8_forgotten_lists_a_namespaces_forgotten_entries_to_restore(
    client: TestClient, db: Session
) -> None:
    _, store, base = _agent(db, client)
    _put(store, "owner", "plan", "launch in March")
    _put(store, "owner", "todo", "milk")
    _put(store, "owner", "kept", "still here")
    _put(store, "shared", "faq", "opening hours 9-5")
    _forget(store, "owner", "plan", 1)
    _forget(store, "owner", "todo", 2)
    _forget(store, "shared", "faq", 3)

    overview = client.get(base)
    assert table(overview.text, "namespaces") == [
        ["Namespace", "Whose", "Entries", "Forgotten", "Last change (UTC)", "Last 30 days", "Kept"],
        ["owner", "owner", "1", "2", "2026-11-01 12:02", "", "forever"],  # a forgetting changes it
        ["shared", "shared", "0", "1", "2026-11-01 12:03", "", "forever"],  # all forgotten: listed
    ]
    listing = client.get(f"{base}/namespace", params={"namespace": "owner"})
    assert (
        f'<a href="{base}/forgotten?namespace=owner" id="forgotten-link">Forgotten entries</a>'
        in listing.text
    )
    page = client.get(f"{base}/forgotten", params={"namespace": "owner"})
    assert page.status_code == 200
    assert "<hgroup><h1>Forgotten in owner</h1><p>the owner's own notes</p></hgroup>" in page.text
    assert table(page.text, "forgotten") == [
        ["Key", "Forgotten", "By", "What was forgotten", ""],
        ["todo", "2026-11-01 12:02:00", "you, on the portal", "milk", ""],
        ["plan", "2026-11-01 12:01:00", "you, on the portal", "launch in March", ""],
    ]
    restores = forms(page.text, "/memory/restore")
    forgetting = [v.id for v in service.forgotten(store, "owner")]
    assert [r["version"] for r in restores] == [str(v) for v in forgetting]

    answer = client.post(f"{base}/restore", data=restores[1])  # plan
    assert (answer.status_code, answer.headers["location"]) == (
        303,
        f"{base}/entry?namespace=owner&key=plan",
    )
    restored = service.get(store, "owner", "plan")
    assert restored is not None and restored.content == "launch in March"
    again = client.get(f"{base}/forgotten", params={"namespace": "owner"})
    assert table(again.text, "forgotten")[1:] == [
        ["todo", "2026-11-01 12:02:00", "you, on the portal", "milk", ""]
    ]
    none = client.get(f"{base}/forgotten", params={"namespace": "caller:bob"})
    assert (none.status_code, table(none.text, "forgotten")) == (200, [])
    assert (
        '<p id="none-forgotten">Nothing forgotten in this namespace (or retention removed it).</p>'
        in none.text
    )


def test_p6_a_forgotten_entry_is_listed_until_retention_removes_its_versions(
    client: TestClient, db: Session
) -> None:
    published, store, base = _agent(db, client)
    _put(store, "caller:bob", "prefs", "tea")
    _forget(store, "caller:bob", "prefs", 1)
    retention.set_rule(store, "caller:*", 30)
    retention.sweep_agent(db, published.scope.agent_id, AT + timedelta(days=29))
    db.commit()
    kept = client.get(f"{base}/forgotten", params={"namespace": "caller:bob"})
    assert [row[0] for row in table(kept.text, "forgotten")] == ["Key", "prefs"]
    retention.sweep_agent(db, published.scope.agent_id, AT + timedelta(days=31))
    db.commit()
    assert service.versions(store, "caller:bob", "prefs") == []
    gone = client.get(f"{base}/forgotten", params={"namespace": "caller:bob"})
    assert table(gone.text, "forgotten") == []
    assert table(client.get(base).text, "namespaces") == []  # nothing left to list
