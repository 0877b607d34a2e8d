"""Driving `webagents chat` in tests."""

from __future__ import annotations

import io

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from webagents import Agent
from webagents.cli.chat import ChatApp, PromptReader


async def drive(
    agent: Agent, typed: str, notice: str | None = None, resume: str | None = None
) -> str:
    """Type `typed` into the chat and return everything it printed."""
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=False)
    with create_pipe_input() as pipe:
        pipe.send_text(typed)
        reader = PromptReader(None, input=pipe, output=DummyOutput())
        await ChatApp(agent, console=console, reader=reader, notice=notice).run(resume=resume)
    return out.getvalue()
