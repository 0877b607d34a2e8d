"""Property tests (M2-M4, M7, M9): identities, keys, tool arguments and search text at random."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from webagents import Caller
from webagents.errors import ToolError
from webagents.notes.layout import EPISODE_PREFIX, check_key, namespace_folder

from .budgets import examples
from .memory_helpers import ALICE, memory_agent, seed, use

ROOT = Path("/memory-root")
_identity = st.one_of(
    st.text(min_size=1, max_size=300),
    st.sampled_from(["..", "../owner", "/etc/passwd", "a/b", "Alice@X", "alice@x", "CON", "."]),
    st.builds(lambda s: s.upper(), st.text(min_size=1, max_size=20)),
)


@settings(max_examples=examples(300))
@given(st.lists(_identity, min_size=2, max_size=6, unique=True))
def test_m7_distinct_identities_never_share_a_folder_and_none_escapes(
    identities: list[str],
) -> None:
    folders = {}
    for identity in identities:
        namespace = Caller.verified(identity).namespace
        if namespace is None:
            continue
        folder = namespace_folder(ROOT, namespace)
        assert folder.parent == ROOT / "callers"
        assert re.fullmatch(r"[a-z0-9-]{1,40}-[0-9a-f]{32}", folder.name), folder.name
        assert folder.name.lower() == folder.name  # safe on case-insensitive file systems
        folders.setdefault(folder, set()).add(namespace)
    assert all(len(namespaces) == 1 for namespaces in folders.values())


@settings(max_examples=examples(500))
@given(st.text(max_size=80))
def test_m4_only_slugs_are_keys(key: str) -> None:
    is_slug = re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", key) is not None
    try:
        check_key(key)
        accepted = True
    except ToolError:
        accepted = False
    assert accepted == (is_slug and not key.startswith(EPISODE_PREFIX))


_value = st.one_of(st.text(max_size=40), st.integers(), st.none(), st.booleans())
_arguments = st.dictionaries(
    st.sampled_from(["key", "content", "description", "namespace", "store", "user", "path"]),
    _value,
    max_size=5,
)


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text(errors="replace")
        for path in sorted(root.rglob("*.md"))
    }


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    tool=st.sampled_from(["memory_write", "memory_forget"]),
    arguments=_arguments,
    key=st.one_of(
        st.sampled_from(["shared-faq", "owner-plan", "bob-secret", "x"]), st.text(max_size=20)
    ),
)
async def test_m3_random_arguments_from_a_caller_touch_only_its_own_namespace(
    tool: str, arguments: dict[str, Any], key: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _, skill = memory_agent(Path(tmp) / "keeper")
        await seed(skill)
        root = skill.store.root
        alice = namespace_folder(root, "caller:alice@example.com")
        before = _snapshot(root)
        try:
            await use(skill, ALICE, tool, **{"key": key, "content": "x", **arguments})
        except ToolError:
            pass
        after = _snapshot(root)
        changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
        assert all((root / p).parent == alice for p in changed), changed


_NOTES = {
    "caller:alice@example.com": "alice private tea garden NEAR",
    "caller:bob@example.com": "bob private tea garden AND secret",
    "owner": "owner private tea garden OR plan",
    "shared": "shared hours tea",
}


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    query=st.one_of(
        st.text(max_size=60),
        st.sampled_from(
            [
                'tea" OR namespace:*',
                "NEAR(tea garden)",
                "bob*",
                "content:secret",
                "tea) OR (secret",
                '"',
                "AND",
                "*",
                "^tea",
                "tea NOT x",
            ]
        ),
    )
)
async def test_m9_random_search_text_never_raises_nor_reaches_another_caller(query: str) -> None:
    skill = _search_skill()
    hits = await use(skill, ALICE, "memory_search", query=query)
    assert {hit["namespace"] for hit in hits} <= {"caller:alice@example.com", "shared"}
    assert json.dumps(hits).count("bob") == 0


_SEARCH_SKILL: list[Any] = []


def _search_skill() -> Any:
    """One agent with a note in each namespace, shared by the examples (read-only)."""
    if not _SEARCH_SKILL:
        _, skill = memory_agent(Path(tempfile.mkdtemp()) / "keeper")
        for namespace, content in _NOTES.items():
            skill.store.write(namespace, "n", content, "")
        skill.index.rebuild()
        _SEARCH_SKILL.append(skill)
    return _SEARCH_SKILL[0]


_LINE = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x85\u2028\u2029"),
    max_size=60,
)


@given(description=_LINE, updated=_LINE.filter(bool), kind=st.sampled_from(["note", "episode"]))
def test_m7_the_fast_reading_of_written_notes_agrees_with_yaml(
    description: str, updated: str, kind: str
) -> None:
    """Notes the agent writes are read without a YAML parser; what that reads must be what a
    YAML parser reads, for any description and time."""
    import yaml

    from webagents.notes.note_file import Note, one_line, parse_note

    description = one_line(description)
    note = Note("owner", "k", "the body\n", description, updated, kind)
    text = note.render()
    front = yaml.safe_load(text.split("---\n")[1])
    assert front == {
        "description": description,
        "updated": updated,
        **({"kind": kind} if kind != "note" else {}),
    }
    assert parse_note(text.encode(), namespace="owner", key="k", mtime=0) == note


_PLAINISH = st.from_regex(r"[A-Za-z][A-Za-z0-9 ,._()/&+-]{0,20}", fullmatch=True)
"""Text a YAML reader takes as a plain scalar, more or less (double spaces, a space last)."""
_FRONT_FIELD = st.one_of(
    _LINE,
    _PLAINISH,
    _LINE.map(json.dumps),
    _PLAINISH.map(json.dumps),
    st.sampled_from(['""', '"a\\"b"', "yes", "No", '"2026-11-30T01:00:00+00:00"']),
)


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    description=_LINE,
    updated=_LINE.filter(bool),
    kind=st.sampled_from(["note", "episode"]),
    content=st.text(max_size=40),
    raw_description=_FRONT_FIELD,
    raw_updated=_FRONT_FIELD,
    tail=st.sampled_from(["", "kind: episode\n", "kind: other\n", "extra: 1\n"]),
)
@example(
    description="",
    updated="t",
    kind="note",
    content="",
    raw_description="Two  spaces",
    raw_updated='"2026-11-30"',
    tail="",
)
@example(
    description="",
    updated="t",
    kind="note",
    content="",
    raw_description='" lead\\tand tab"',
    raw_updated='"2026-11-30"',
    tail="kind: episode\n",
)
def test_m9_the_quick_reading_at_start_agrees_with_the_careful_one(
    tmp_path: Path,
    description: str,
    updated: str,
    kind: str,
    content: str,
    raw_description: str,
    raw_updated: str,
    tail: str,
) -> None:
    """A start reads the notes the agent wrote the quick way (`read_written`) and anything
    else the careful way (`NoteStore.load`); where the quick way reads a file at all, it
    must read what the careful way reads: for notes as written, and for hand-made front
    matter of every shape."""
    from webagents.notes.note_file import Note, one_line, read_written
    from webagents.notes.store import NoteStore

    store = NoteStore(tmp_path)
    written = Note("owner", "k", content, one_line(description), updated, kind).render()
    by_hand = f"---\ndescription: {raw_description}\nupdated: {raw_updated}\n{tail}---\n{content}"
    for n, text in enumerate((written, by_hand)):
        path = tmp_path / f"note-{n}.md"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        quick = read_written("owner", f"note-{n}", str(path))
        if quick is not None:
            assert quick == store.load("owner", f"note-{n}", str(path))


def test_m9_notes_as_the_agent_writes_them_are_read_the_quick_way(tmp_path: Path) -> None:
    from webagents.notes.note_file import Note, now, read_written
    from webagents.notes.store import NoteStore

    store = NoteStore(tmp_path)
    for n, (description, kind) in enumerate(
        [("", "note"), ("Launch plan", "note"), ("Où: Lisbon, 3 March", "episode")]
    ):
        path = tmp_path / f"n{n}.md"
        path.write_text(Note("owner", f"n{n}", "body\n", description, now(), kind).render())
        quick = read_written("owner", f"n{n}", str(path))
        assert quick is not None and quick == store.load("owner", f"n{n}", str(path))
