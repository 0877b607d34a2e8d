"""`webagents memory PATH list|search|show|forget|export`: the owner's notes tooling.

Every subcommand calls the memory skill's own methods (the ones behind its tools and
/memory) as `Caller.owner()`, so the owner reads every namespace and writes `owner` and
`shared` only, as `rights` says. Caller identities are printed with `shown_to_owner`, so a
lookalike never passes for another caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..caller import SHARED_NAMESPACE, shown_to_owner
from ..context import Context
from ..errors import ToolError
from ..rights import Rights, rights_of
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


@dataclass(frozen=True, slots=True)
class _Memory:
    skill: MemorySkill
    ctx: Context
    path: Path

    @property
    def rights(self) -> Rights:
        return rights_of(self.ctx.caller)

    def readable(self) -> list[str]:
        return self.rights.readable(self.skill.store.namespaces())


def _memory(ctx: click.Context) -> _Memory:
    path, profile = ctx.obj
    agent = owner_agent(path, profile)
    skill = agent.skill(MemorySkill.name)
    if not isinstance(skill, MemorySkill):
        fail(f"the agent in {path} keeps no notes: add `- memory` under skills: in its AGENT.md")
    return _Memory(skill, owner_context(agent), path)


def _checked_namespace(namespace: str | None) -> str | None:
    if namespace is not None and namespace not in ("owner", SHARED_NAMESPACE):
        if not namespace.startswith("caller:") or namespace == "caller:":
            fail(
                f"'{shown_to_owner(namespace)}' is not a namespace: give owner, shared or "
                "caller:<identity> (`webagents memory PATH list` shows them)"
            )
    return namespace


async def _call(memory: _Memory, method: str, *args: Any) -> Any:
    try:
        return await getattr(memory.skill, method)(memory.ctx, *args)
    except ToolError as exc:  # worded for the model: point the person at the command
        listing = f"`webagents memory {memory.path} list` shows them"
        fail(str(exc).replace("memory_list shows the keys", listing))


def _run(fn: Any, *args: Any) -> Any:
    import asyncio

    return run_or_exit(lambda: asyncio.run(fn(*args)))


@click.group()
@click.argument("path", type=click.Path(path_type=Path))
@profile_option
@click.pass_context
def memory(ctx: click.Context, path: Path, profile: str | None) -> None:
    """The notes of the agent in PATH, as its owner: every namespace to read; owner and
    shared to forget from.

    \b
    webagents memory PATH list [--namespace NS]
    webagents memory PATH search QUERY [--namespace NS]
    webagents memory PATH show KEY [--namespace NS]
    webagents memory PATH forget KEY [--namespace owner|shared] [--yes]
    webagents memory PATH export [--output FILE]
    """
    ctx.obj = (path, current_profile(ctx, profile))


_namespace_option = click.option(
    "--namespace", "-n", metavar="NS", help="owner, shared or caller:<identity>."
)


@memory.command("list")
@_namespace_option
@json_option
@click.pass_context
def list_(ctx: click.Context, namespace: str | None, as_json: bool) -> None:
    """The namespaces (owner, shared, every caller's) and their notes, newest first."""
    _run(_list, _memory(ctx), _checked_namespace(namespace), as_json)


async def _list(memory: _Memory, namespace: str | None, as_json: bool) -> None:
    namespaces = [namespace] if namespace else memory.readable()
    if namespace and not memory.rights.can_read(namespace):
        fail(f"you cannot read the namespace '{shown_to_owner(namespace)}'")
    index = memory.skill.index
    index.refresh(namespaces)
    listed: list[dict[str, Any]] = []
    for ns in namespaces:
        entries = index.entries(ns)
        listed.append(
            {
                "namespace": ns,
                "shown": shown_to_owner(ns),
                "episodes": len(index.entries(ns, kind="episode")),
                "notes": [
                    {"key": e.key, "description": e.summary, "updated": e.updated} for e in entries
                ],
            }
        )
    problems = [str(p) for ns in namespaces for p in index.problems.get(ns, [])]
    if as_json:
        print_json(
            {"root": str(memory.skill.store.root), "namespaces": listed, "problems": problems}
        )
        return
    click.echo(f"Notes are kept in {memory.skill.store.root}")
    if not listed:
        click.echo("no notes yet")
    for entry in listed:
        count, episodes = len(entry["notes"]), entry["episodes"]
        click.echo(
            f"{entry['shown']}: {count} note{'' if count == 1 else 's'}, "
            f"{episodes} episode{'' if episodes == 1 else 's'}"
        )
        for note in entry["notes"]:
            click.echo(f"  {note['key']} · {one_line(note['description'])} · {note['updated']}")
    for problem in problems:
        click.secho(f"cannot read {problem} (left as it is)", fg="yellow", err=True)


@memory.command()
@click.argument("query")
@_namespace_option
@json_option
@click.pass_context
def search(ctx: click.Context, query: str, namespace: str | None, as_json: bool) -> None:
    """Notes and conversation summaries that match QUERY, best first."""
    _run(_search, _memory(ctx), query, _checked_namespace(namespace), as_json)


async def _search(memory: _Memory, query: str, namespace: str | None, as_json: bool) -> None:
    hits = await _call(memory, "search", query, namespace)
    for hit in hits:
        hit["shown"] = shown_to_owner(hit["namespace"])
    if as_json:
        print_json({"hits": hits})
        return
    if not hits:
        click.echo(f"nothing matches {query!r}")
    for hit in hits:
        click.echo(f"{hit['shown']} · {hit['key']} · {one_line(hit['description'])}")
        click.echo(f"    {one_line(hit['snippet'])}")


@memory.command()
@click.argument("key")
@_namespace_option
@json_option
@click.pass_context
def show(ctx: click.Context, key: str, namespace: str | None, as_json: bool) -> None:
    """One note in full (KEY is looked up in owner, then shared, unless --namespace)."""
    _run(_show, _memory(ctx), key, _checked_namespace(namespace), as_json)


async def _show(memory: _Memory, key: str, namespace: str | None, as_json: bool) -> None:
    note = await _call(memory, "read", key, namespace)
    note["shown"] = shown_to_owner(note["namespace"])
    if as_json:
        print_json(note)
        return
    click.echo(f"key: {note['key']}")
    click.echo(f"namespace: {note['shown']}")
    if "kind" in note:
        click.echo(f"kind: {note['kind']}")
    click.echo(f"description: {one_line(note['description'])}")
    click.echo(f"updated: {note['updated']}")
    click.echo()
    click.echo(text_lines(note["content"]))


@memory.command()
@click.argument("key")
@click.option(
    "--namespace",
    "-n",
    metavar="NS",
    default="owner",
    show_default=True,
    help="Where the note is: owner or shared (a caller's notes are the caller's to change).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask first.")
@click.pass_context
def forget(ctx: click.Context, key: str, namespace: str, yes: bool) -> None:
    """Remove one note, after asking (answering no leaves it and exits 1)."""
    _run(_forget, _memory(ctx), key, _checked_namespace(namespace), yes)


async def _forget(memory: _Memory, key: str, namespace: str, yes: bool) -> None:
    if not memory.rights.can_write(namespace):
        folder = memory.skill.store.folder(namespace)
        fail(
            f"the owner cannot forget notes in {shown_to_owner(namespace)}: the owner writes "
            f"owner and shared only (a caller's notes are its own); its files are in {folder}"
        )
    note = await _call(memory, "read", key, namespace)
    question = f"Forget {key!r} from {namespace} ({one_line(note['description'])})?"
    if not confirmed(question, yes):
        click.echo(f"kept {key}")
        raise SystemExit(FAILURE_EXIT)
    await _call(memory, "forget", key, namespace)
    click.echo(f"forgot {key} from {namespace}")


@memory.command()
@output_option
@click.pass_context
def export(ctx: click.Context, output: Path | None) -> None:
    """Every note and summary the owner reads, as JSON Lines: one object per note."""
    _run(_export, _memory(ctx), output)


async def _export(memory: _Memory, output: Path | None) -> None:
    namespaces = memory.readable()
    index = memory.skill.index
    index.refresh(namespaces)
    lines = []
    for ns in namespaces:
        for kind in ("note", "episode"):
            for entry in index.entries(ns, kind=kind):
                try:
                    note = await memory.skill.read(memory.ctx, entry.key, ns)
                except ToolError as exc:  # removed meanwhile, or damaged: say so, go on
                    click.secho(f"skipped: {exc}", fg="yellow", err=True)
                    continue
                note.setdefault("kind", "note")
                note["shown"] = shown_to_owner(ns)
                lines.append(json_line(note))
    export_to(output, lines)
