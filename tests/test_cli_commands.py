"""The `webagents` command's subcommands: every one listed and reachable, and those of their
own modules loaded only when asked for (a `run` or `chat` does not import the portal)."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from webagents.cli import _ELSEWHERE, main

EVERY = ["chat", "daemon", "login", "logout", "mcp", "memory", "portal", "publish", "run"]
EVERY += ["serve", "sessions", "whoami"]


def test_cli_help_lists_every_command() -> None:
    answer = CliRunner().invoke(main, ["--help"])
    assert answer.exit_code == 0, answer.output
    listed = [line.split()[0] for line in answer.output.split("Commands:\n", 1)[1].splitlines()]
    assert listed == sorted(EVERY)


def test_cli_each_command_of_its_own_module_resolves_to_itself() -> None:
    context = main.make_context("webagents", [])
    for name in _ELSEWHERE:
        command = main.get_command(context, name)
        assert command is not None and command.name == name
        assert CliRunner().invoke(main, [name, "--help"]).exit_code == 0


def test_cli_importing_the_command_loads_neither_the_portal_nor_its_libraries() -> None:
    probe = (
        "import json, sys, webagents.cli; print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in {'sqlalchemy', 'alembic', 'mcp', 'jinja2', 'psycopg'} "
        "or m.startswith('webagents.portal.'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(loaded) == []
