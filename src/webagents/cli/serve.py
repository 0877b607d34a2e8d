"""`webagents serve` and `webagents daemon`: agents on the network, through uvicorn."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path

import click
import uvicorn

from ..model import Model
from ..server import AgentHost, ServedAgent, create_app
from ..server.app import DEFAULT_MAX_BODY_BYTES
from ..testing import OFFLINE_NOTICE, OfflineModel


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, so that `--port 0` can report the port it got."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it a keep-alive client waits on a delayed ACK (about 40 ms a request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def run_server(
    host: AgentHost, sock: socket.socket, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> None:
    logging.getLogger("webagents").setLevel(logging.INFO)
    address, port = sock.getsockname()[:2]
    shown = f"[{address}]" if ":" in address else address
    for served in host.all():
        click.echo(f"  {served.describe_access()}")
        click.echo(f"  POST http://{shown}:{port}/agents/{served.name}/chat/completions")
    click.echo(f"webagents: serving at http://{shown}:{port}/v1 (Ctrl-C stops)", nl=True)
    config = uvicorn.Config(
        create_app(host, max_body_bytes=max_body_bytes),
        log_level="info",
        timeout_graceful_shutdown=10,
    )
    uvicorn.Server(config).run(sockets=[sock])


def agent_host(path: Path, model: Model | None, profile: str | None) -> tuple[AgentHost, str]:
    """`webagents serve`: the one agent in PATH, and the line that says so."""
    served = ServedAgent.load(path, model=model, profile=profile)
    return AgentHost(
        [served]
    ), f"webagents serve: agent {served.name!r} from {served.agent.directory}"


def folders_host(root: Path, model: Model | None, profile: str | None) -> tuple[AgentHost, str]:
    """`webagents daemon`: every agent folder under ROOT, and the line that says so."""
    from ..server.daemon import FolderHost

    if not root.is_dir():
        raise click.ClickException(f"{root} is not a folder: give the folder that holds agents")
    folders = FolderHost(root, model=model, profile=profile)
    return folders, (
        f"webagents daemon: {len(folders.names())} agents under {folders.root}, "
        "reloaded when their files change"
    )


HostMaker = Callable[[Path, "Model | None", "str | None"], tuple[AgentHost, str]]


def serve_hosted(
    make_host: HostMaker,
    path: Path,
    *,
    host: str,
    port: int,
    offline: bool,
    profile: str | None,
    max_body_mb: int,
) -> None:
    """Load what `make_host` serves, bind, say what is served and how, and serve it."""
    hosted, banner = make_host(path, OfflineModel() if offline else None, profile)
    if offline:
        click.echo(OFFLINE_NOTICE)
    sock = bind(host, port)
    click.echo(banner)
    run_server(hosted, sock, max_body_bytes=max_body_mb * 1024 * 1024)
