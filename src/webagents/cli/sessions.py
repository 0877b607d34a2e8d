"""`webagents sessions PATH list|show|rm|export`: the owner's kept conversations tooling.

The conversations are the session store's (the ones the chat, `run` and serve keep). What the
owner may reach is asked of `rights`: it reads its own and every caller's, and removes only
its own. A caller's folder is named by a hash of its namespace; the namespace is shown when
the folder's marker or the agent's notes name it, else the hash, and identities go through
`shown_to_owner`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from ..caller import shown_to_owner
from ..rights import rights_of
from ..sessions.session_file import SessionError, SessionFile
from ..sessions.store import LocalSessionStore, caller_hash
from ..skills.memory.skill import MemorySkill
from .exit_codes import run_or_exit
from .owner import (
    FAILURE_EXIT,
    confirmed,
    export_to,
    fail,
    json_line,
    json_option,
    one_line,
    output_option,
    owner_agent,
    owner_context,
    print_json,
    text_lines,
)
from .profile_option import current_profile, profile_option

MIN_HASH_PREFIX = 8


@dataclass(frozen=True, slots=True)
class Kept:
    """One kept conversation and whose it is."""

    namespace: str | None
    """`owner` or `caller:<identity>`; None for a caller the agent's notes do not name."""
    caller_hash: str | None
    """The caller folder's name (None for the owner's)."""
    session: SessionFile

    @property
    def shown(self) -> str:
        if self.namespace is not None:
            return shown_to_owner(self.namespace)
        return f"caller#{self.caller_hash}"

    def summary(self) -> dict[str, Any]:
        session = self.session
        return {
            "id": session["id"],
            "namespace": self.namespace,
            "caller_hash": self.caller_hash,
            "shown": self.shown,
            "title": session["title"],
            "created": session["created"],
            "updated": session["updated"],
            "messages": len(session["messages"]),
        }

    def matches(self, namespace: str) -> bool:
        """Whether --namespace names this one's caller: its namespace, or its hash (or the
        first 8 or more characters of it, with or without `caller#`)."""
        if namespace == self.namespace:
            return True
        if self.caller_hash is not None and caller_hash(namespace) == self.caller_hash:
            return True  # caller:<identity> of a folder that nothing here names
        digest = namespace.removeprefix("caller#")
        return (
            self.caller_hash is not None
            and len(digest) >= MIN_HASH_PREFIX
            and self.caller_hash.startswith(digest)
        )


@dataclass(slots=True)
class _Sessions:
    store: LocalSessionStore
    own: str
    reads_all: bool
    known: dict[str, str]
    """caller folder hash -> the namespace, for every caller the agent's notes name."""
    path: Path

    def all(self) -> tuple[list[Kept], list[str]]:
        """Every conversation the owner may read, newest first, and what could not be read."""
        found: list[Kept] = []
        problems: list[str] = []
        folders: list[tuple[str | None, str | None]] = [(self.own, None)]
        callers = self.store.root / "callers"
        if self.reads_all and callers.is_dir() and not callers.is_symlink():
            for entry in sorted(os.scandir(callers), key=lambda e: e.name):
                if not entry.is_dir(follow_symlinks=False):
                    problems.append(f"{entry.path} is not a caller's folder; it is left as it is")
                    continue
                folders.append((self.known.get(entry.name), entry.name))
        for namespace, digest in folders:
            sessions, unread = self.store.read_folder(digest)
            found.extend(Kept(namespace, digest, session) for session in sessions)
            problems.extend(unread)
        found.sort(key=lambda kept: kept.session["updated"], reverse=True)
        return found, problems

    def one(self, session_id: str, namespace: str | None) -> Kept:
        found, _ = self.all()
        chosen = [
            kept
            for kept in found
            if kept.session["id"] == session_id and (namespace is None or kept.matches(namespace))
        ]
        if not chosen:
            where = f" of {shown_to_owner(namespace)}" if namespace else ""
            fail(
                f"there is no kept conversation {session_id!r}{where}: "
                f"`webagents sessions {self.path} list` shows them"
            )
        if len(chosen) > 1:
            names = ", ".join(kept.shown for kept in chosen)
            fail(
                f"{len(chosen)} callers have a conversation {session_id!r} ({names}): "
                "add --namespace"
            )
        return chosen[0]


def _sessions(ctx: click.Context) -> _Sessions:
    from .chat import keep_conversations

    path, profile = ctx.obj
    agent = owner_agent(path, profile)
    skill = keep_conversations(agent)
    assert skill is not None  # an agent loaded from a folder has one to keep them by
    rights = rights_of(owner_context(agent).caller)
    own = rights.conversations
    assert own is not None
    known: dict[str, str] = {}
    notes = agent.skill(MemorySkill.name)
    if isinstance(notes, MemorySkill):
        known = {caller_hash(ns): ns for ns in notes.store.namespaces() if ns.startswith("caller:")}
    known.update(skill.store.caller_namespaces())  # each folder's own marker, where it has one
    return _Sessions(skill.store, own, rights.reads_all_conversations, known, path)


@click.group()
@click.argument("path", type=click.Path(path_type=Path))
@profile_option
@click.pass_context
def sessions(ctx: click.Context, path: Path, profile: str | None) -> None:
    """The kept conversations of the agent in PATH, as its owner: yours and every caller's
    to read; yours to remove.

    \b
    webagents sessions PATH list
    webagents sessions PATH show ID [--namespace NS]
    webagents sessions PATH rm ID [--yes]
    webagents sessions PATH export [--output FILE]
    """
    ctx.obj = (path, current_profile(ctx, profile))


_namespace_option = click.option(
    "--namespace",
    "-n",
    metavar="NS",
    help="owner, caller:<identity>, or the caller#<hash> the list shows.",
)


@sessions.command("list")
@json_option
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every kept conversation, newest first: its id, whose, when, how many messages."""
    run_or_exit(_list, _sessions(ctx), as_json)


def _list(kept: _Sessions, as_json: bool) -> None:
    found, problems = kept.all()
    if as_json:
        print_json(
            {
                "root": str(kept.store.root),
                "sessions": [k.summary() for k in found],
                "problems": problems,
            }
        )
        return
    click.echo(f"Conversations are kept in {kept.store.root}")
    if not found:
        click.echo("no kept conversations yet")
    for k in found:
        n = len(k.session["messages"])
        click.echo(
            f"  {k.session['id']} · {k.shown} · {_when(k.session['updated'])} · "
            f"{n} message{'' if n == 1 else 's'} · {one_line(k.session['title'])}"
        )
    for problem in problems:
        click.secho(f"skipped: {problem}", fg="yellow", err=True)


@sessions.command()
@click.argument("session_id", metavar="ID")
@_namespace_option
@json_option
@click.pass_context
def show(ctx: click.Context, session_id: str, namespace: str | None, as_json: bool) -> None:
    """One conversation, message by message."""
    run_or_exit(_show, _sessions(ctx), session_id, namespace, as_json)


def _show(kept: _Sessions, session_id: str, namespace: str | None, as_json: bool) -> None:
    k = kept.one(session_id, namespace)
    if as_json:
        print_json(
            {
                "namespace": k.namespace,
                "caller_hash": k.caller_hash,
                "shown": k.shown,
                "session": k.session,
            }
        )
        return
    session = k.session
    click.echo(f"conversation: {session['id']}")
    click.echo(f"caller: {k.shown}")
    click.echo(f"title: {one_line(session['title'])}")
    click.echo(f"created: {_when(session['created'])} · updated: {_when(session['updated'])}")
    for message in session["messages"]:
        click.echo()
        role = str(message.get("role"))
        content = message.get("content")
        if isinstance(content, str) and content:
            click.echo(f"{role}: {text_lines(content)}")
        elif content:
            click.echo(f"{role}: {text_lines(str(content))}")
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            name, arguments = function.get("name"), function.get("arguments")
            click.echo(f"{role}: ↳ {one_line(str(name))}({one_line(str(arguments))})")


@sessions.command()
@click.argument("session_id", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Do not ask first.")
@click.pass_context
def rm(ctx: click.Context, session_id: str, yes: bool) -> None:
    """Remove one of your conversations, after asking (answering no keeps it, exit 1)."""
    run_or_exit(_rm, _sessions(ctx), session_id, yes)


def _rm(kept: _Sessions, session_id: str, yes: bool) -> None:
    try:
        session = kept.store.load(kept.own, session_id)
    except SessionError as exc:
        fail(str(exc))
    if session is None:
        others, _ = kept.all()
        if any(k.session["id"] == session_id for k in others):
            fail(
                f"the conversation {session_id!r} is a caller's: the owner reads callers' "
                "conversations but removes only its own"
            )
        fail(
            f"there is no kept conversation {session_id!r} of yours: "
            f"`webagents sessions {kept.path} list` shows them"
        )
    if not confirmed(
        f"Remove the conversation {session_id!r} ({one_line(session['title'])})?", yes
    ):
        click.echo(f"kept {session_id}")
        raise SystemExit(FAILURE_EXIT)
    kept.store.remove(kept.own, session_id)
    click.echo(f"removed {session_id}")


@sessions.command()
@output_option
@click.pass_context
def export(ctx: click.Context, output: Path | None) -> None:
    """Every conversation you may read, as JSON Lines: one kept conversation per line."""
    run_or_exit(_export, _sessions(ctx), output)


def _export(kept: _Sessions, output: Path | None) -> None:
    found, problems = kept.all()
    for problem in problems:
        click.secho(f"skipped: {problem}", fg="yellow", err=True)
    lines = []
    for k in found:
        session: dict[str, Any] = {
            name: value for name, value in k.session.items() if name != "generation"
        }
        whose = {"namespace": k.namespace, "caller_hash": k.caller_hash, "shown": k.shown}
        lines.append(json_line({**whose, **session}))
    export_to(output, lines)


def _when(stamp: str) -> str:
    try:
        return f"{datetime.fromisoformat(stamp).astimezone():%Y-%m-%d %H:%M}"
    except ValueError:
        return stamp
