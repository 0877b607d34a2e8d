"""`webagents run PATH [PROMPT]`: one turn as the owner, the reply on stdout, for scripts.

The person running it is the owner, as in the chat, and the conversation is kept like the
chat's (S2): `--resume ID` or `-c` continues one (the chat's /resume sees them too), and
`--json` says which id it was kept under. The prompt is the argument, or stdin when it is
not given or is `-`.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from ..agent import Agent, Conversation
from ..agent_file import AGENT_FILE, load_agent
from ..caller import Caller
from ..context import is_conversation_id
from ..errors import ConfigError
from ..rights import rights_of
from ..sessions import SessionConflict
from ..skills.memory.skill import MemorySkill
from .chat import keep_conversations, new_conversation_id, offline_notice
from .owner import FAILURE_EXIT, fail, print_json


def check_path_first(path: Path, prompt: str | None) -> None:
    """With one argument that names no agent, it was most likely the prompt, given without
    the folder: say that the folder comes first (before stdin is read for a prompt, whose
    absence would otherwise be the error)."""
    if prompt is not None or path.is_file() or (path / AGENT_FILE).is_file():
        return  # two arguments: load_agent reports a PATH that is not an agent's
    what = (
        f"{path} is not an agent folder (it has no {AGENT_FILE})"
        if path.exists()
        else f"there is no agent folder {str(path)!r}"
    )
    text = shlex.quote(str(path))
    fail(
        f"{what}: webagents run takes the agent's folder, then the prompt: "
        f"webagents run PATH {text} (in the agent's folder: webagents run . {text})"
    )


def read_prompt(prompt: str | None) -> str:
    """The prompt given, or stdin's whole text (for `-` or no prompt)."""
    if prompt is None or prompt == "-":
        if sys.stdin is None or sys.stdin.isatty():
            fail('give a prompt: webagents run PATH "your message" (or pipe it on stdin)')
        prompt = sys.stdin.read()
    text = prompt.strip()
    if not text:
        fail('the prompt is empty: webagents run PATH "your message" (or pipe it on stdin)')
    return text.encode("utf-8", "replace").decode("utf-8")


def run_once(
    path: Path,
    prompt: str | None,
    *,
    offline: bool = False,
    as_json: bool = False,
    resume: str | None = None,
    profile: str | None = None,
) -> None:
    """`resume`: a kept conversation's id, `latest`, or None for a new conversation."""
    check_path_first(path, prompt)
    text = read_prompt(prompt)
    model = None
    if offline:
        from ..offline import OfflineModel

        model = OfflineModel()
    agent = load_agent(path, model=model, profile=profile)
    keep_conversations(agent)
    try:  # resolve now, so a missing key is reported before anything is kept
        agent.model  # noqa: B018
    except ConfigError as exc:
        raise ConfigError(f"{exc}; or try the offline scripted model: --offline") from None
    if offline:
        click.secho(offline_notice(agent), fg="yellow", err=True)
    asyncio.run(_turn(agent, path, text, resume, as_json))


PUSH_SECONDS = 10.0
"""How long a run waits at its end for its notes to reach the portal (`portal: true`)."""


async def _turn(agent: Agent, path: Path, text: str, resume: str | None, as_json: bool) -> None:
    try:
        conversation = await _conversation(agent, path, resume)
        try:
            result = await conversation.send(text)
        except SessionConflict as exc:
            fail(conflict_message(exc, path), FAILURE_EXIT)
    finally:
        try:
            await push_memory(agent)
        finally:
            await agent.aclose()
    if as_json:
        usage = result.usage
        reply: dict[str, Any] = {
            "agent": agent.name,
            "conversation": conversation.ctx.conversation_id,
            "kept": conversation.ctx.kept,
            "reply": result.output,
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            },
        }
        print_json(reply)
        return
    click.echo(result.output)


async def push_memory(agent: Agent) -> None:
    """The notes this run wrote, in the portal before it exits (or said to wait)."""
    memory = agent.skill(MemorySkill.name)
    if isinstance(memory, MemorySkill):
        waiting = await memory.finish(PUSH_SECONDS)
        if waiting is not None:
            click.secho(waiting, fg="yellow", err=True)


async def _conversation(agent: Agent, path: Path, resume: str | None) -> Conversation:
    from ..skills.session import SessionSkill

    owner = Caller.owner()
    sessions = agent.skill(SessionSkill.name)
    if resume is None or not isinstance(sessions, SessionSkill):
        return await agent.start(caller=owner, conversation_id=new_conversation_id())
    namespace = rights_of(owner).conversations
    assert namespace is not None
    if resume == "latest":
        recent = sessions.store.recent(namespace, limit=1)
        if not recent:
            fail(f'there is no kept conversation to continue yet: webagents run {path} "..."')
        resume = recent[0].id
    if not is_conversation_id(resume):
        fail(f"{resume!r} is not a conversation id: `webagents sessions {path} list` shows them")
    if sessions.store.load(namespace, resume) is None:
        fail(
            f"there is no kept conversation {resume!r}: `webagents sessions {path} list` shows them"
        )
    # Without messages= it goes on from what is kept, and its turn is kept only while it
    # extends that: a run or chat that kept a turn meanwhile is never overwritten.
    return await agent.start(caller=owner, conversation_id=resume)


def conflict_message(error: SessionConflict, path: Path) -> str:
    """What `run` says when another run or chat kept a turn of its conversation first."""
    where = shlex.quote(str(path))
    return (
        f"the conversation {error.session_id} was continued by another run or chat after "
        "this one loaded it: this message was not kept and no reply is shown; what the other "
        f"kept is left as it is. See it: webagents sessions {where} show {error.session_id}; "
        "then send this message again, to go on after it: "
        f'webagents run {where} --resume {error.session_id} "..."'
    )
