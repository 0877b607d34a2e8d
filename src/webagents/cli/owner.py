"""What the owner's command-line tools share: the agent of a folder, loaded for its owner, and
the way they print results and refusals.

The person at the terminal is the agent's owner (as in the chat): every read and write goes
through the skills' own methods with `Caller.owner()`, so `rights` decides, as it does for
the tools and /memory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from ..agent import Agent
from ..agent_file import AGENT_FILE, load_agent
from ..caller import Caller
from ..context import Context
from .terminal_text import printable

USAGE_EXIT = 2
"""Something the user must fix (an argument, a file, the environment): CLI rule."""
FAILURE_EXIT = 1


def fail(message: str, code: int = USAGE_EXIT) -> NoReturn:
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(code)


def owner_agent(path: Path, profile: str | None) -> Agent:
    """The agent in `path`, with no model resolved (the owner's tools call none)."""
    if path.is_dir() and not (path / AGENT_FILE).is_file():
        fail(f"{path} is not an agent folder: it has no {AGENT_FILE} (see examples/assistant)")
    if not path.exists():
        fail(f"{path} does not exist: give the folder of an agent (the one with its {AGENT_FILE})")
    return load_agent(path, profile=profile)


def owner_context(agent: Agent) -> Context:
    """The context of the owner's own requests, as the chat's are (no conversation)."""
    return Context(agent=agent.info, caller=Caller.owner())


def confirmed(question: str, yes: bool) -> bool:
    """`--yes`, or the person at the terminal said yes (no answer, as on a closed stdin: no)."""
    if yes:
        return True
    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort:
        click.echo("", err=True)
        return False


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


def json_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def json_option(fn: Any) -> Any:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (the shape is in docs/cli.md)."
    )(fn)


def export_to(output: Path | None, lines: list[str]) -> None:
    """JSON Lines to stdout, or to a new private file (0600, written whole or not at all)."""
    if output is None:
        click.echo("".join(lines), nl=False)
        return
    from .._files import atomic_write

    if output.exists() or output.is_symlink():
        fail(f"{output} exists already: name a new file, or remove that one first")
    if not output.parent.is_dir():
        fail(f"{output.parent} is not a folder: create it first, or name a file in another one")
    atomic_write(output, "".join(lines).encode("utf-8"))
    click.echo(f"exported {len(lines)} to {output}", err=True)


def output_option(fn: Any) -> Any:
    return click.option(
        "--output",
        "-o",
        type=click.Path(path_type=Path, dir_okay=False),
        help="A new file to write (default: stdout).",
    )(fn)


def one_line(text: str) -> str:
    """Text kept by a model or a caller, on one line and without terminal control codes."""
    return " ".join(printable(text).split())


def text_lines(text: str) -> str:
    """The same, keeping its lines."""
    return "\n".join(printable(line) for line in text.split("\n"))
