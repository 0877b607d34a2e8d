"""S5-S7: the session store's layout, ids, permissions, and files it will not overwrite."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from webagents.home import sessions_dir
from webagents.sessions import (
    LocalSessionStore,
    SessionConflict,
    SessionError,
    SessionFile,
    new_session,
)
from webagents.sessions.store import agent_folder_name, caller_hash

ALICE = "caller:alice@example.com"
BOB = "caller:bob@example.com"


def _store(tmp_path: Path, profile: str | None = None) -> LocalSessionStore:
    return LocalSessionStore(tmp_path / "agents" / "helper", "helper", profile=profile)


def test_s7_the_owner_and_each_caller_have_their_own_place(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for namespace in ("owner", ALICE, BOB):
        store.save(
            namespace,
            new_session("plan", "helper", [{"role": "user", "content": f"hi from {namespace}"}]),
        )
    root = sessions_dir() / agent_folder_name(tmp_path / "agents" / "helper") / "helper"
    assert store.root == root
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.json"))
    assert files == sorted(
        [
            "plan.json",
            f"callers/{caller_hash(ALICE)}/plan.json",
            f"callers/{caller_hash(BOB)}/plan.json",
        ]
    )
    loaded = {ns: store.load(ns, "plan") for ns in ("owner", ALICE, BOB)}
    assert {ns: s["messages"][0]["content"] for ns, s in loaded.items() if s} == {
        "owner": "hi from owner",
        ALICE: f"hi from {ALICE}",
        BOB: f"hi from {BOB}",
    }
    assert store.load(ALICE, "other") is None


@pytest.mark.parametrize("session_id", ["../x", "a/b", "..", ".", "x" * 129, "", "sp ace", "é"])
def test_s7_ids_that_are_not_safe_names_are_refused_and_create_nothing(
    tmp_path: Path, session_id: str
) -> None:
    store = _store(tmp_path)
    with pytest.raises(SessionError, match="is not a conversation id"):
        store.save(ALICE, new_session(session_id, "helper", []))
    assert not sessions_dir().exists() or not any(sessions_dir().rglob("*.json"))


def test_s5_nobody_verified_has_no_place(tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="kept for verified callers only"):
        _store(tmp_path).folder("shared")


def test_s7_private_files_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = _store(tmp_path)
        store.save(ALICE, new_session("s1", "helper", [{"role": "user", "content": "x"}]))
    finally:
        os.umask(old)
    path = store.path(ALICE, "s1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for folder in (path.parent, path.parent.parent, store.root, sessions_dir()):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_s6_saving_replaces_and_the_shape_is_the_documented_one(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = new_session(
        "s1", "helper", [{"role": "user", "content": "Plan the launch."}], system_prompt="You help."
    )
    store.save(ALICE, first)
    longer = [
        *first["messages"],
        {"role": "assistant", "content": "Lisbon, 3 March."},
        {"role": "user", "content": "And the budget?"},
    ]
    store.save(ALICE, {**first, "messages": longer})
    data = json.loads(store.path(ALICE, "s1").read_text())
    assert sorted(data) == [
        "agent",
        "created",
        "format",
        "generation",
        "id",
        "messages",
        "system_prompt",
        "title",
        "updated",
        "usage",
    ]
    assert (data["format"], data["title"], data["messages"]) == (1, "Plan the launch.", longer)
    assert [(s.id, s.title, s.turns) for s in store.recent(ALICE)] == [
        ("s1", "Plan the launch.", 2)
    ]


def test_s7_a_corrupt_session_file_is_reported_and_never_overwritten(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.save(ALICE, new_session("good", "helper", [{"role": "user", "content": "x"}]))
    broken = store.path(ALICE, "broken")
    broken.write_text("{ not json")
    with pytest.raises(SessionError, match="is not a session file"):
        store.load(ALICE, "broken")
    with pytest.raises(SessionError, match="it is left as it is"):
        store.save(ALICE, new_session("broken", "helper", []))
    assert broken.read_text() == "{ not json"
    assert [s.id for s in store.recent(ALICE)] == ["good"]
    assert store.problems == [f"{broken} is not a session file (not JSON); it is left as it is"]


def test_s7_a_profile_keeps_sessions_apart(tmp_path: Path) -> None:
    default, work = _store(tmp_path), _store(tmp_path, profile="work")
    work.save("owner", new_session("s1", "helper", [{"role": "user", "content": "work"}]))
    assert default.load("owner", "s1") is None
    home = Path(os.environ["WEBAGENTS_HOME"])
    assert work.root.parents[2] == home.with_name(f"{home.name}-work")
    assert work.load("owner", "s1") is not None


# -- the journal: a turn costs the turn, not the conversation -----------------------------------


def _turn(n: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"question {n}"},
        {"role": "assistant", "content": f"answer {n}"},
    ]


def test_s6_turns_are_appended_to_the_journal_and_folded_in_later(tmp_path: Path) -> None:
    store = _store(tmp_path)
    session = new_session("s1", "helper", _turn(0), system_prompt="You help.")
    version = store.save(ALICE, session)
    path = store.path(ALICE, "s1")
    journal = path.with_name(".s1.journal")
    snapshot = path.read_bytes()
    for n in range(1, 4):
        session["messages"] = [*session["messages"], *_turn(n)]
        version = store.save(ALICE, session, since=version)
    assert path.read_bytes() == snapshot  # only the journal grew
    assert len(journal.read_bytes().splitlines()) == 3
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    loaded = store.load(ALICE, "s1")
    assert loaded is not None
    assert loaded["messages"] == [m for n in range(4) for m in _turn(n)]
    assert loaded["updated"] == session["updated"]

    # A client that edits its history is kept as it sent it (S6), through the journal too.
    session["messages"] = [{"role": "user", "content": "a new start"}, *_turn(9)]
    session["title"] = "a new start"
    version = store.save(ALICE, session, since=version, replace=True)
    loaded = store.load(ALICE, "s1")
    assert loaded is not None
    assert (loaded["messages"], loaded["title"]) == (session["messages"], "a new start")

    # Once the journal outgrows its snapshot, the conversation is written whole again.
    big = "x" * 4000
    for n in range(10):
        session["messages"] = [*session["messages"], {"role": "user", "content": f"{n}{big}"}]
        version = store.save(ALICE, session, since=version)
    assert not journal.exists() or len(journal.read_bytes()) < 16 * 1024
    data = json.loads(path.read_text())
    assert data["generation"] >= 1
    assert store.load(ALICE, "s1") == {**session, "generation": data["generation"]}


def test_s6_a_record_cut_short_by_a_crash_was_never_kept(tmp_path: Path) -> None:
    store = _store(tmp_path)
    session = new_session("s1", "helper", _turn(0))
    version = store.save(ALICE, session)
    session["messages"] = [*_turn(0), *_turn(1)]
    version = store.save(ALICE, session, since=version)
    journal = store.path(ALICE, "s1").with_name(".s1.journal")
    with journal.open("ab") as file:
        file.write(b'{"generation": 0, "keep": 4, "add": [{"role": "us')  # the crash
    loaded = store.open(ALICE, "s1")
    assert loaded is not None
    assert loaded[0]["messages"] == [*_turn(0), *_turn(1)]
    # The next save writes the conversation whole, and the torn record is gone.
    session["messages"] = [*_turn(0), *_turn(1), *_turn(2)]
    store.save(ALICE, session, since=loaded[1])
    assert not journal.exists()
    assert store.load(ALICE, "s1")["messages"] == session["messages"]  # type: ignore[index]


def _kept_with_a_journal(store: LocalSessionStore) -> tuple[SessionFile, Path]:
    """Alice's `s1`: its first turn written whole, its second appended to the journal."""
    session = new_session("s1", "helper", _turn(0))
    version = store.save(ALICE, session)
    session["messages"] = [*_turn(0), *_turn(1)]
    store.save(ALICE, session, since=version)
    return session, store.path(ALICE, "s1").with_name(".s1.journal")


def test_s7_a_damaged_journal_is_reported_and_never_overwritten(tmp_path: Path) -> None:
    store = _store(tmp_path)
    session, journal = _kept_with_a_journal(store)
    journal.write_bytes(journal.read_bytes() + b"my own line\n")
    before = (journal.read_bytes(), store.path(ALICE, "s1").read_bytes())
    with pytest.raises(SessionError, match=r"\.s1\.journal:2 is not a session record"):
        store.load(ALICE, "s1")
    with pytest.raises(SessionError, match="it is left as it is"):
        store.save(ALICE, session)
    assert (journal.read_bytes(), store.path(ALICE, "s1").read_bytes()) == before


def test_s6_records_from_before_the_last_whole_write_are_skipped(tmp_path: Path) -> None:
    """A crash after the conversation was written whole, before its journal was removed."""
    store = _store(tmp_path)
    session, journal = _kept_with_a_journal(store)
    stale = journal.read_bytes()
    session["messages"] = _turn(7)
    store.save(ALICE, session, replace=True)  # whole: generation 1
    journal.write_bytes(stale)  # as if it had never been removed
    assert store.load(ALICE, "s1")["messages"] == _turn(7)  # type: ignore[index]


def test_s6_two_writers_from_one_version_keep_the_last_whole(tmp_path: Path) -> None:
    store = _store(tmp_path)
    session = new_session("s1", "helper", [*_turn(0), *_turn(1)])
    version = store.save(ALICE, session)
    first = {**session, "messages": [*_turn(0), *_turn(2)]}
    second = {**session, "messages": [*_turn(0), *_turn(1), *_turn(3)]}
    store.save(ALICE, first, since=version, replace=True)  # type: ignore[arg-type]
    # Stale, and replacing on purpose (S6: a client's whole conversation): written whole.
    store.save(ALICE, second, since=version, replace=True)  # type: ignore[arg-type]
    assert store.load(ALICE, "s1")["messages"] == second["messages"]  # type: ignore[index]


@pytest.mark.parametrize("since", ["stale", "current", "none"])
def test_s6_a_save_that_drops_kept_messages_is_refused_unless_it_replaces(
    tmp_path: Path, since: str
) -> None:
    """Another writer's turn, kept after this one's version was read (stale), earlier turns
    this one dropped (current), or a conversation never read here (none): nothing is
    written."""
    store = _store(tmp_path)
    session = new_session("s1", "helper", [*_turn(0), *_turn(1)])
    version = store.save(ALICE, session)
    other = {**session, "messages": [*_turn(0), *_turn(1), *_turn(2)]}
    later = store.save(ALICE, other, since=version)  # type: ignore[arg-type]
    ours = {**session, "messages": [*_turn(0), *_turn(1), *_turn(3)]}
    if since == "current":
        ours["messages"] = _turn(3)
    files = sorted(p for p in store.folder(ALICE).iterdir() if p.name != ".lock")
    before = {p.name: p.read_bytes() for p in files}
    base = {"stale": version, "current": later, "none": None}[since]
    with pytest.raises(SessionConflict) as refused:
        store.save(ALICE, ours, since=base)  # type: ignore[arg-type]
    assert refused.value.session_id == "s1"  # the whole message: test_session_resume.py
    after = sorted(p for p in store.folder(ALICE).iterdir() if p.name != ".lock")
    assert {p.name: p.read_bytes() for p in after} == before
    assert store.load(ALICE, "s1")["messages"] == other["messages"]  # type: ignore[index]

    store.save(ALICE, ours, since=base, replace=True)  # type: ignore[arg-type]
    assert store.load(ALICE, "s1")["messages"] == ours["messages"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('"messages": [1, 2]', "is not a session file (messages)"),
        ('"messages": [], "system_prompt": 42', "is not a session file (messages)"),
        ('"messages": [], "id": "other"', "holds the conversation 'other', not 's1'"),
    ],
)
def test_s7_a_hand_edited_file_of_the_wrong_shape_is_reported(
    tmp_path: Path, text: str, reason: str
) -> None:
    store = _store(tmp_path)
    store.save(ALICE, new_session("s1", "helper", _turn(0)))
    path = store.path(ALICE, "s1")
    data = json.loads(path.read_text())
    data.update(json.loads("{" + text + "}"))
    path.write_text(json.dumps(data))
    with pytest.raises(SessionError, match=re.escape(reason)):
        store.load(ALICE, "s1")
    assert store.recent(ALICE) == []
    assert store.problems == [f"{path} {reason}; it is left as it is"]


def test_s6_text_that_is_not_valid_unicode_is_kept_as_near_as_can_be(tmp_path: Path) -> None:
    store = _store(tmp_path)
    session = new_session(
        "s1",
        "helper",
        [
            {"role": "user", "content": "hi \ud800 there"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": 2**70}]},
        ],
    )
    version = store.save(ALICE, session)
    session["messages"] = [*session["messages"], {"role": "user", "content": "more \udcff"}]
    store.save(ALICE, session, since=version)
    loaded = store.load(ALICE, "s1")
    assert loaded is not None
    assert loaded["messages"] == [
        {"role": "user", "content": "hi ? there"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": str(2**70)}]},
        {"role": "user", "content": "more ?"},
    ]


def test_r5_a_kept_file_without_a_prompt_gains_the_first_one_built(tmp_path: Path) -> None:
    store = _store(tmp_path)
    session = new_session("s1", "helper", _turn(0))  # no system_prompt (an older file)
    version = store.save(ALICE, session)
    session["system_prompt"] = "The prompt built now."
    session["messages"] = [*_turn(0), *_turn(1)]
    store.save(ALICE, session, since=version)
    loaded = store.load(ALICE, "s1")
    assert loaded is not None
    assert loaded["system_prompt"] == "The prompt built now."
