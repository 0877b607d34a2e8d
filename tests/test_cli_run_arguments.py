"""`webagents run` (SPEC section 6) through the real command: a prompt given without the
agent's folder is taken for the folder; the error says so and gives the command line that
works, whether stdin is empty or not."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from webagents.cli import main

from .conftest import write_agent


@pytest.mark.parametrize("stdin", ["", "piped text\n"], ids=["no-stdin", "stdin"])
def test_cli_run_a_prompt_without_the_folder_says_the_folder_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdin: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "--offline", "text"], input=stdin)
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        "error: there is no agent folder 'text': webagents run takes the agent's folder, then "
        "the prompt: webagents run PATH text (in the agent's folder: webagents run . text)\n",
    )
    words = CliRunner().invoke(main, ["run", "--offline", "what's next?"], input=stdin)
    assert (words.exit_code, words.stderr) == (
        2,
        "error: there is no agent folder \"what's next?\": webagents run takes the agent's "
        "folder, then the prompt: webagents run PATH 'what'\"'\"'s next?' (in the agent's "
        "folder: webagents run . 'what'\"'\"'s next?')\n",
    )


def test_cli_run_a_folder_without_agent_md_and_no_prompt_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "docs", "--offline"], input="")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: docs is not an agent folder (it has no AGENT.md): webagents run takes the "
        "agent's folder, then the prompt: webagents run PATH docs (in the agent's folder: "
        "webagents run . docs)\n",
    )


def test_cli_run_the_folder_then_the_prompt_still_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_agent(tmp_path / "helper", "name: helper")
    monkeypatch.chdir(folder)
    given = CliRunner().invoke(main, ["run", ".", "--offline", "text"])
    assert (given.exit_code, given.stdout.splitlines()) == (
        0,
        [
            "(offline scripted model, turn 1) You said: 'text'. I can't think offline, but "
            "everything around me works: the chat, the slash commands and my skills' tools."
        ],
    )
    # Only the folder, and the prompt on stdin, as before.
    piped = CliRunner().invoke(main, ["run", ".", "--offline"], input="from stdin\n")
    assert piped.exit_code == 0, piped.stderr
    assert piped.stdout.startswith("(offline scripted model, turn 1) You said: 'from stdin'.")
    empty = CliRunner().invoke(main, ["run", ".", "--offline"], input="  \n")
    assert (empty.exit_code, empty.stderr) == (
        2,
        'error: the prompt is empty: webagents run PATH "your message" (or pipe it on stdin)\n',
    )
