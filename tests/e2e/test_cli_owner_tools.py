"""The owner's command line, run for real: `webagents run`, `webagents memory`,
`webagents sessions`, and what a mistyped command says (issue 11's friction bullets)."""

from __future__ import annotations

import asyncio
import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from webagents.agent_file import load_agent
from webagents.caller import Caller, shown_to_owner
from webagents.context import Context
from webagents.model import ModelRequest
from webagents.sessions import new_session
from webagents.sessions.store import LocalSessionStore, caller_hash
from webagents.skills.memory.skill import MemorySkill
from webagents.testing import FunctionModel, ScriptedServer

from ..conftest import write_agent
from .conftest import REPO, child_env, webagents_command

pytestmark = pytest.mark.e2e

BOB = "caller:bob@example.com"
LOOKALIKE = "caller:bob@ex\u0430mple.com"  # a Cyrillic a (U+0430)
CAROL = "caller:carol@example.com"  # kept conversations, but no notes to name her by


def cli(
    tmp_path: Path, *args: str, input: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [webagents_command(), *args],
        env=child_env(tmp_path, **env),
        cwd=str(tmp_path),
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
    )


def example(tmp_path: Path) -> Path:
    """A copy of examples/assistant (memory and session skills), so no test writes the repo."""
    folder = tmp_path / "assistant"
    shutil.copytree(REPO / "examples" / "assistant", folder, ignore=shutil.ignore_patterns(".*"))
    return folder


# -- a mistyped command -----------------------------------------------------------------------


def test_cli_a_mistyped_subcommand_suggests_the_closest(tmp_path: Path) -> None:
    usage = "Usage: webagents [OPTIONS] [COMMAND] [ARGS]...\nTry 'webagents --help' for help.\n\n"
    for typed, meant in [("serv", "serve"), ("deamon", "daemon"), ("sesions", "sessions")]:
        done = cli(tmp_path, typed, "x")
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            f"{usage}Error: no such command or folder {typed!r}; did you mean {meant!r}?\n"
        )


def test_cli_a_folder_named_like_a_command_is_still_chatted_with(
    tmp_path: Path,
) -> None:
    write_agent(tmp_path / "serv", "name: serv")  # an existing folder wins over a suggestion
    write_agent(tmp_path / "some" / "folder", "name: nested")
    for path, name in [("serv", "serv"), ("some/folder", "nested")]:
        done = cli(tmp_path, path, "--offline", input="hi\n/exit\n")
        assert done.returncode == 0, done.stderr
        assert (
            done.stdout.splitlines()[0]
            == f"{name} · offline-scripted · /help for commands, Ctrl-D to leave"
        )
    missing = cli(tmp_path, "no-such-agent", "--offline")  # like no command: the chat's error
    assert missing.returncode == 2
    assert missing.stderr == (
        f"error: {tmp_path / 'no-such-agent'}: there is no such folder: "
        "give the folder of an agent\n"
    )


# -- the offline model's memory phrases ----------------------------------------------------------


def test_cli_offline_chat_says_the_memory_phrases_and_they_work(tmp_path: Path) -> None:
    folder = example(tmp_path)
    done = cli(
        tmp_path,
        "chat",
        str(folder),
        "--offline",
        input="remember that my cat is called Tom\n/new\nwhat do you remember\n/exit\n",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1:3] == [
        "offline: replies come from the scripted model in webagents.offline, not a real one "
        "(set OPENAI_API_KEY or OPENAI_BASE_URL to talk to a real model)",
        'memory works offline too: say "remember that <something>", then "what do you '
        'remember" (also in a new conversation)',
    ]
    assert "  ↳ memory_write" in done.stdout
    assert '"key":"my-cat-is","namespace":"owner","description":"my cat is called Tom"' in (
        done.stdout
    )
    assert (folder / ".webagents" / "memory" / "owner" / "my-cat-is.md").is_file()


def test_cli_offline_notice_without_the_memory_skill_has_no_memory_phrases(
    tmp_path: Path,
) -> None:
    folder = write_agent(tmp_path / "plain", "name: plain")
    done = cli(tmp_path, "chat", str(folder), "--offline", input="/exit\n")
    assert done.returncode == 0, done.stderr
    assert "memory works offline" not in done.stdout


# -- webagents run ------------------------------------------------------------------------------


def test_cli_run_prints_the_reply_and_keeps_the_conversation(
    tmp_path: Path,
) -> None:
    folder = example(tmp_path)
    notice = (
        "offline: replies come from the scripted model in webagents.offline, not a real one "
        "(set OPENAI_API_KEY or OPENAI_BASE_URL to talk to a real model)\n"
        'memory works offline too: say "remember that <something>", then "what do you '
        'remember" (also in a new conversation)\n'
    )
    said = cli(tmp_path, "run", str(folder), "hello there", "--offline")
    assert (said.returncode, said.stderr) == (0, notice)
    assert said.stdout == (
        "(offline scripted model, turn 1) You said: 'hello there'. I can't think offline, "
        "but everything around me works: the chat, the slash commands and my skills' tools.\n"
    )
    piped = cli(tmp_path, "run", str(folder), "--offline", "--json", input="from stdin\n")
    assert piped.returncode == 0, piped.stderr
    answer = json.loads(piped.stdout)
    conversation = answer.pop("conversation")
    assert answer == {
        "agent": "assistant",
        "kept": True,
        "reply": "(offline scripted model, turn 1) You said: 'from stdin'. I can't think "
        "offline, but everything around me works: the chat, the slash commands and my "
        "skills' tools.",
        "usage": answer["usage"],
    }
    assert set(answer["usage"]) == {"prompt_tokens", "completion_tokens"}
    dash = cli(tmp_path, "run", str(folder), "-", "--offline", "-c", input="and on\n")
    assert dash.returncode == 0, dash.stderr
    assert dash.stdout.startswith("(offline scripted model, turn 2) You said: 'and on'.")
    again = cli(tmp_path, "run", str(folder), "third", "--offline", "--resume", conversation)
    assert again.stdout.startswith("(offline scripted model, turn 3) You said: 'third'.")
    listed = json.loads(cli(tmp_path, "sessions", str(folder), "list", "--json").stdout)
    assert sorted((s["title"], s["messages"]) for s in listed["sessions"]) == [
        ("from stdin", 6),
        ("hello there", 2),
    ]


def test_cli_run_refusals_say_what_to_fix(tmp_path: Path) -> None:
    folder = example(tmp_path)
    empty = cli(tmp_path, "run", str(folder), "--offline", input="  \n")
    assert (empty.returncode, empty.stdout) == (2, "")
    assert empty.stderr == (
        'error: the prompt is empty: webagents run PATH "your message" (or pipe it on stdin)\n'
    )
    unknown = cli(tmp_path, "run", str(folder), "hi", "--offline", "--resume", "nope-1")
    assert unknown.returncode == 2
    assert unknown.stderr.endswith(
        f"error: there is no kept conversation 'nope-1': `webagents sessions {folder} list` "
        "shows them\n"
    )
    nothing = cli(tmp_path, "run", str(folder), "hi", "--offline", "-c")
    assert nothing.returncode == 2
    assert nothing.stderr.endswith(
        f'error: there is no kept conversation to continue yet: webagents run {folder} "..."\n'
    )
    no_key = cli(tmp_path, "run", str(folder), "hi")
    assert no_key.returncode == 2
    assert no_key.stderr.startswith("error: ")
    assert no_key.stderr.endswith("; or try the offline scripted model: --offline\n")
    not_agent = cli(tmp_path, "run", str(tmp_path), "hi", "--offline")
    assert not_agent.returncode == 2
    assert "there is no AGENT.md here" in not_agent.stderr
    both = cli(tmp_path, "run", str(folder), "hi", "--offline", "-c", "--resume", "x")
    assert both.returncode == 2
    assert both.stderr.endswith("Error: give --resume or -c, not both\n")


def test_cli_run_a_failing_model_exits_1(tmp_path: Path) -> None:
    def broken(request: ModelRequest) -> str:
        raise RuntimeError("the model is down")

    folder = write_agent(tmp_path / "helper", "name: helper\nmodel: openai/test-model")
    with ScriptedServer(FunctionModel(broken)) as server:
        done = cli(tmp_path, "run", str(folder), "hi", OPENAI_BASE_URL=server.base_url)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("error: ")


# -- webagents memory ---------------------------------------------------------------------------


def _notes(folder: Path) -> None:
    """Notes of the owner, shared, Bob and a lookalike of Bob, written as each of them."""

    async def write() -> None:
        agent = load_agent(folder)
        skill = agent.skill("memory")
        assert isinstance(skill, MemorySkill)
        writers = [
            (Caller.owner(), "tone", "dry and brief", "how to answer", None),
            (Caller.owner(), "office", "the office is in Lyon", "where we work", "shared"),
            (Caller.verified("bob@example.com"), "pet", "Bob has a cat", "Bob's pet", None),
            (Caller.verified("bob@ex\u0430mple.com"), "pet", "a dog", "the lookalike's", None),
        ]
        for caller, key, content, description, namespace in writers:
            ctx = Context(agent=agent.info, caller=caller)
            await skill.write(ctx, key, content, description, namespace)

    asyncio.run(write())


def test_cli_memory_list_search_show_as_the_owner(tmp_path: Path) -> None:
    folder = example(tmp_path)
    _notes(folder)
    listed = cli(tmp_path, "memory", str(folder), "list")
    assert listed.returncode == 0, listed.stderr
    lines = [line.rsplit(" · ", 1)[0] for line in listed.stdout.splitlines()]
    shown_lookalike = "caller:bob@ex\\u0430mple.com (#"
    assert lines[0] == f"Notes are kept in {folder / '.webagents' / 'memory'}"
    assert lines[1:5] == [
        "owner: 1 note, 0 episodes",
        "  tone · how to answer",
        "shared: 1 note, 0 episodes",
        "  office · where we work",
    ]
    assert sorted(lines[5:]) == sorted(
        [
            "caller:bob@example.com: 1 note, 0 episodes",
            "  pet · Bob's pet",
            lines[lines.index("  pet · the lookalike's") - 1],
            "  pet · the lookalike's",
        ]
    )
    assert any(line.startswith(shown_lookalike) for line in lines)
    assert "bob@ex\u0430mple" not in listed.stdout  # never printed as the lookalike it is

    as_json = json.loads(cli(tmp_path, "memory", str(folder), "list", "--json").stdout)
    assert [ns["namespace"] for ns in as_json["namespaces"]][:2] == ["owner", "shared"]
    lookalike = next(ns for ns in as_json["namespaces"] if ns["namespace"] == LOOKALIKE)
    assert lookalike["shown"].startswith(shown_lookalike)
    assert lookalike["episodes"] == 0
    assert [(n["key"], n["description"]) for n in lookalike["notes"]] == [
        ("pet", "the lookalike's")
    ]
    assert as_json["problems"] == []

    found = json.loads(cli(tmp_path, "memory", str(folder), "search", "cat", "--json").stdout)
    assert [(h["namespace"], h["key"], h["shown"]) for h in found["hits"]] == [(BOB, "pet", BOB)]
    shown = cli(tmp_path, "memory", str(folder), "show", "pet", "--namespace", BOB)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:3] == ["key: pet", f"namespace: {BOB}", "description: Bob's pet"]
    assert lines[3].startswith("updated: ")
    assert lines[4:] == ["", "Bob has a cat"]


def test_cli_memory_refusals_say_how_to_go_on(tmp_path: Path) -> None:
    folder = example(tmp_path)
    _notes(folder)
    missing = cli(tmp_path, "memory", str(folder), "show", "pet")  # Bob's: not owner/shared
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == (
        f"error: there is no note 'pet'; `webagents memory {folder} list` shows them\n"
    )
    bad_ns = cli(tmp_path, "memory", str(folder), "list", "--namespace", "callers")
    assert bad_ns.returncode == 2
    assert bad_ns.stderr == (
        "error: 'callers' is not a namespace: give owner, shared or caller:<identity> "
        "(`webagents memory PATH list` shows them)\n"
    )
    not_agent = cli(tmp_path, "memory", str(tmp_path), "list")
    assert not_agent.returncode == 2
    assert not_agent.stderr == (
        f"error: {tmp_path} is not an agent folder: it has no AGENT.md (see examples/assistant)\n"
    )
    plain = write_agent(tmp_path / "plain", "name: plain")
    no_memory = cli(tmp_path, "memory", str(plain), "list")
    assert no_memory.returncode == 2
    assert no_memory.stderr == (
        f"error: the agent in {plain} keeps no notes: add `- memory` under skills: in its "
        "AGENT.md\n"
    )
    bobs = folder / ".webagents" / "memory" / "callers"
    before = sorted(p.read_bytes() for p in bobs.rglob("pet.md"))
    refused = cli(tmp_path, "memory", str(folder), "forget", "pet", "-n", BOB, "--yes")
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        f"error: the owner cannot forget notes in {BOB}: the owner writes owner and shared "
        "only (a caller's notes are its own); its files are in "
    )
    assert sorted(p.read_bytes() for p in bobs.rglob("pet.md")) == before


def test_cli_memory_forget_asks_first(tmp_path: Path) -> None:
    folder = example(tmp_path)
    _notes(folder)
    note = folder / ".webagents" / "memory" / "owner" / "tone.md"
    declined = cli(tmp_path, "memory", str(folder), "forget", "tone", input="n\n")
    assert (declined.returncode, declined.stdout) == (1, "kept tone\n")
    assert declined.stderr == "Forget 'tone' from owner (how to answer)? [y/N]: "
    closed = cli(tmp_path, "memory", str(folder), "forget", "tone")  # no answer at all
    assert (closed.returncode, closed.stdout) == (1, "kept tone\n")
    assert note.is_file()
    agreed = cli(tmp_path, "memory", str(folder), "forget", "tone", input="y\n")
    assert (agreed.returncode, agreed.stdout) == (0, "forgot tone from owner\n")
    assert not note.exists()
    shared = cli(tmp_path, "memory", str(folder), "forget", "office", "-n", "shared", "-y")
    assert (shared.returncode, shared.stdout) == (0, "forgot office from shared\n")
    again = cli(tmp_path, "memory", str(folder), "forget", "tone", "--yes")
    assert again.returncode == 2
    assert again.stderr == (
        f"error: there is no note 'tone'; `webagents memory {folder} list` shows them\n"
    )


def test_cli_memory_export_writes_every_namespace_as_json_lines(tmp_path: Path) -> None:
    folder = example(tmp_path)
    _notes(folder)
    done = cli(tmp_path, "memory", str(folder), "export")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted((r["namespace"], r["key"], r["kind"], r["content"]) for r in rows) == [
        (BOB, "pet", "note", "Bob has a cat"),
        (LOOKALIKE, "pet", "note", "a dog"),
        ("owner", "tone", "note", "dry and brief"),
        ("shared", "office", "note", "the office is in Lyon"),
    ]
    assert all(
        set(r) == {"key", "namespace", "description", "updated", "content", "kind", "shown"}
        for r in rows
    )
    target = tmp_path / "notes.jsonl"
    to_file = cli(tmp_path, "memory", str(folder), "export", "-o", str(target))
    assert (to_file.returncode, to_file.stdout) == (0, "")
    assert to_file.stderr == f"exported 4 to {target}\n"
    assert target.read_text(encoding="utf-8") == done.stdout
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    exists = cli(tmp_path, "memory", str(folder), "export", "-o", str(target))
    assert exists.returncode == 2
    assert exists.stderr == (
        f"error: {target} exists already: name a new file, or remove that one first\n"
    )


# -- webagents sessions -------------------------------------------------------------------------


def _conversations(folder: Path) -> None:
    store = LocalSessionStore(folder, "assistant")
    for namespace, session_id, text in [
        ("owner", "mine-1", "my own question"),
        (BOB, "bob-1", "Bob asks"),
        (CAROL, "same-id", "Carol asks"),
        ("owner", "same-id", "mine too"),
    ]:
        messages = [
            {"role": "user", "content": text},
            {"role": "assistant", "content": f"answer to {text}"},
        ]
        store.save(namespace, new_session(session_id, "assistant", messages))
    # Carol's folder as one kept before folders had markers: nothing names her but her hash.
    (store.folder(CAROL) / ".namespace").unlink()


def test_cli_sessions_list_show_export_as_the_owner(tmp_path: Path) -> None:
    folder = example(tmp_path)
    _notes(folder)  # Bob's folder names him; Carol's has no marker and no notes: her hash
    _conversations(folder)
    listed = json.loads(cli(tmp_path, "sessions", str(folder), "list", "--json").stdout)
    carol = f"caller#{caller_hash(CAROL)}"
    rows = sorted(
        (
            (s["id"], s["namespace"], s["caller_hash"], s["shown"], s["title"], s["messages"])
            for s in listed["sessions"]
        ),
        key=repr,
    )
    assert rows == sorted(
        [
            ("bob-1", BOB, caller_hash(BOB), BOB, "Bob asks", 2),
            ("mine-1", "owner", None, "owner", "my own question", 2),
            ("same-id", None, caller_hash(CAROL), carol, "Carol asks", 2),
            ("same-id", "owner", None, "owner", "mine too", 2),
        ],
        key=repr,
    )
    text = cli(tmp_path, "sessions", str(folder), "list")
    assert text.returncode == 0, text.stderr
    assert len(text.stdout.splitlines()) == 5
    assert f"  bob-1 · {BOB} · " in text.stdout

    shown = cli(tmp_path, "sessions", str(folder), "show", "bob-1")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:3] == ["conversation: bob-1", f"caller: {BOB}", "title: Bob asks"]
    assert lines[4:] == ["", "user: Bob asks", "", "assistant: answer to Bob asks"]
    ambiguous = cli(tmp_path, "sessions", str(folder), "show", "same-id")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr == (
        f"error: 2 callers have a conversation 'same-id' (owner, {carol}): add --namespace\n"
    )
    by_hash = cli(
        tmp_path, "sessions", str(folder), "show", "same-id", "-n", caller_hash(CAROL)[:8], "--json"
    )
    picked = json.loads(by_hash.stdout)
    assert (picked["namespace"], picked["caller_hash"], picked["session"]["title"]) == (
        None,
        caller_hash(CAROL),
        "Carol asks",
    )
    # caller:<identity>, as docs/cli.md says, names her too, though nothing here names her.
    by_name = cli(tmp_path, "sessions", str(folder), "show", "same-id", "-n", CAROL, "--json")
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout) == picked
    lookalike = cli(tmp_path, "sessions", str(folder), "show", "bob-1", "-n", LOOKALIKE)
    assert (lookalike.returncode, lookalike.stderr) == (
        2,
        f"error: there is no kept conversation 'bob-1' of {shown_to_owner(LOOKALIKE)}: "
        f"`webagents sessions {folder} list` shows them\n",
    )
    assert "\u0430" not in lookalike.stderr  # escaped, never the letter that passes for an a

    exported = cli(tmp_path, "sessions", str(folder), "export")
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    whose = [(r["namespace"], r["shown"], r["id"], len(r["messages"])) for r in lines]
    assert sorted(whose, key=repr) == sorted(
        [
            (BOB, BOB, "bob-1", 2),
            ("owner", "owner", "mine-1", 2),
            (None, carol, "same-id", 2),
            ("owner", "owner", "same-id", 2),
        ],
        key=repr,
    )


def test_cli_sessions_rm_removes_only_the_owners_after_asking(tmp_path: Path) -> None:
    folder = example(tmp_path)
    _conversations(folder)
    store = LocalSessionStore(folder, "assistant")
    refused = cli(tmp_path, "sessions", str(folder), "rm", "bob-1", "--yes")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "error: the conversation 'bob-1' is a caller's: the owner reads callers' "
        "conversations but removes only its own\n"
    )
    assert store.load(BOB, "bob-1") is not None
    missing = cli(tmp_path, "sessions", str(folder), "rm", "nope", "--yes")
    assert missing.returncode == 2
    assert missing.stderr == (
        f"error: there is no kept conversation 'nope' of yours: "
        f"`webagents sessions {folder} list` shows them\n"
    )
    declined = cli(tmp_path, "sessions", str(folder), "rm", "mine-1", input="no\n")
    assert (declined.returncode, declined.stdout) == (1, "kept mine-1\n")
    assert store.load("owner", "mine-1") is not None
    agreed = cli(tmp_path, "sessions", str(folder), "rm", "same-id", input="y\n")
    assert (agreed.returncode, agreed.stdout) == (0, "removed same-id\n")
    assert store.load("owner", "same-id") is None
    assert store.load(CAROL, "same-id") is not None  # a caller's of the same id stays
    not_agent = cli(tmp_path, "sessions", str(tmp_path / "nowhere"), "list")
    assert not_agent.returncode == 2
    assert not_agent.stderr == (
        f"error: {tmp_path / 'nowhere'} does not exist: give the folder of an agent (the one "
        "with its AGENT.md)\n"
    )
