"""The `webagents` command: `webagents [chat] [PATH]`, `run`, `serve` and `daemon` here; the
owner's `memory` and `sessions`, and the portal's `portal`, `login`, `whoami`, `logout` and
`publish` from their own modules.

Only the CLI turns errors into exit codes (`exit_codes`). The commands' own modules import
what they share from small modules beside them, never this package, so that the imports flow
one way.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import click

from .connection_options import connection_options
from .exit_codes import run_or_exit
from .profile_option import current_profile, profile_option

# The commands defined in modules of their own, imported only when one of them is run (or
# listed by --help): the portal's alone pulls in SQLAlchemy, Alembic and FastAPI's app, and
# every `webagents` process, a one-shot `run` included, would otherwise pay for all of them.
_ELSEWHERE = {
    "memory": "memory:memory",
    "sessions": "sessions:sessions",
    "mcp": "mcp:mcp",
    "portal": "portal:portal",
    "login": "account:login",
    "whoami": "account:whoami",
    "logout": "account:logout",
    "publish": "publish:publish",
}


class _DefaultToChat(click.Group):
    """`webagents PATH` and plain `webagents` mean `webagents chat [PATH]`; the commands of
    `_ELSEWHERE` are loaded when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*self.commands, *_ELSEWHERE])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _ELSEWHERE and cmd_name not in self.commands:
            module, name = _ELSEWHERE[cmd_name].split(":")
            command = getattr(importlib.import_module(f"{__name__}.{module}"), name)
            assert isinstance(command, click.Command), _ELSEWHERE[cmd_name]
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        known = self.list_commands(ctx)
        if args and args[0] not in known:  # a PATH, or one of chat's options
            mistyped = _mistyped_command(args[0], known)
            if mistyped is not None:
                ctx.fail(f"no such command or folder {args[0]!r}; did you mean {mistyped!r}?")
            return "chat", self.commands["chat"], args
        return super().resolve_command(ctx, args)


def _mistyped_command(word: str, commands: list[str]) -> str | None:
    """The command a first argument that names no folder most likely meant (`serv`, `deamon`);
    None for an option, an existing path, or a word like no command (a folder yet to be
    made, which the chat reports as such)."""
    import difflib
    import os

    if word.startswith("-") or os.sep in word or "." in word or Path(word).exists():
        return None
    close = difflib.get_close_matches(word.lower(), commands, n=1, cutoff=0.7)
    return close[0] if close else None


@click.group(
    cls=_DefaultToChat,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "ignore_unknown_options": True},
)
@profile_option
@click.version_option(package_name="webagents")
@click.pass_context
def main(ctx: click.Context, profile: str | None) -> None:
    """Agents whose memory is kept apart for every caller they serve.

    With no command, chats with the agent in PATH (default: this folder):
    `webagents [chat] [PATH] [--offline]`.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if ctx.invoked_subcommand is None:
        ctx.invoke(chat)


@main.command()
@click.argument("path", default=".", type=click.Path(path_type=Path))
@click.option("--offline", is_flag=True, help="Use the scripted offline model (no key needed).")
@click.option(
    "--resume",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ID]",
    help="Continue a kept conversation: by id, or choose from the list.",
)
@click.option("-c", "--continue", "continue_", is_flag=True, help="Continue the latest one.")
@profile_option
@click.pass_context
def chat(
    ctx: click.Context,
    path: Path,
    offline: bool,
    resume: str | None,
    continue_: bool,
    profile: str | None,
) -> None:
    """Chat with the agent in PATH in the terminal, as its owner.

    Every conversation is kept; /resume in the chat, or --resume and -c here, continue one.
    """
    from .chat import run_chat

    if resume is not None and continue_:
        raise click.UsageError("give --resume or -c, not both")
    if resume and path == Path(".") and (Path(resume) / "AGENT.md").is_file():
        path, resume = Path(resume), ""  # `chat --resume FOLDER`: the folder, not an id
    run_or_exit(
        run_chat,
        path,
        offline=offline,
        profile=current_profile(ctx, profile),
        resume="latest" if continue_ else resume,
    )


def _server_options(fn: Any) -> Any:
    fn = click.option(
        "--host", default="127.0.0.1", show_default=True, help="Address to listen on."
    )(fn)
    fn = click.option(
        "--port",
        default=8000,
        show_default=True,
        type=click.IntRange(0, 65535),
        help="Port (0: any free port).",
    )(fn)
    fn = click.option("--offline", is_flag=True, help="Answer with the scripted offline model.")(fn)
    fn = click.option(
        "--max-body-mb",
        default=8,
        show_default=True,
        type=click.IntRange(1, 1024),
        help="Largest request body accepted, in MiB.",
    )(fn)
    fn = connection_options(fn)
    fn = click.option(
        "--connect/--no-connect",
        default=None,
        help="Portal Connect: open a connection to the portal and answer the callers it "
        "relays (default: for a published agent); --connect also without a link, with "
        "WEBAGENTS_AGENT_TOKEN; --no-connect serves locally only.",
    )(fn)
    return profile_option(fn)


def _serve(ctx: click.Context, daemon: bool, path: Path, options: dict[str, Any]) -> None:
    from .startup import paused_collector

    with paused_collector():  # until serve_guarded: see startup.py
        from .serve import agent_host, folders_host, serve_hosted

        options["profile"] = current_profile(ctx, options.get("profile"))
        run_or_exit(serve_hosted, folders_host if daemon else agent_host, path, **options)


@main.command()
@click.argument("path", default=".", type=click.Path(path_type=Path))
@_server_options
@click.pass_context
def serve(ctx: click.Context, /, path: Path, **options: Any) -> None:
    """Serve the agent in PATH over OpenAI's Chat Completions API."""
    _serve(ctx, False, path, options)


@main.command()
@click.argument("root", default=".", type=click.Path(path_type=Path))
@_server_options
@click.pass_context
def daemon(ctx: click.Context, /, root: Path, **options: Any) -> None:
    """Serve every agent folder under ROOT, reloading an agent when its files change."""
    _serve(ctx, True, root, options)


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.argument("prompt", required=False)
@click.option("--offline", is_flag=True, help="Use the scripted offline model (no key needed).")
@click.option("--json", "as_json", is_flag=True, help="Print the reply and its id as JSON.")
@click.option("--resume", metavar="ID", help="Continue the kept conversation ID.")
@click.option("-c", "--continue", "continue_", is_flag=True, help="Continue the latest one.")
@profile_option
@click.pass_context
def run(
    ctx: click.Context,
    path: Path,
    prompt: str | None,
    offline: bool,
    as_json: bool,
    resume: str | None,
    continue_: bool,
    profile: str | None,
) -> None:
    """Send PROMPT (or stdin, when it is missing or -) to the agent in PATH as its owner and
    print the reply: one turn, for scripts.

    The conversation is kept like the chat's: --resume ID or -c continues it.
    Exit status: 0 answered, 2 something to fix (the agent file, a key, the prompt), 1 failed.
    """
    from .run import run_once

    if resume is not None and continue_:
        raise click.UsageError("give --resume or -c, not both")
    run_or_exit(
        run_once,
        path,
        prompt,
        offline=offline,
        as_json=as_json,
        resume="latest" if continue_ else resume,
        profile=current_profile(ctx, profile),
    )
