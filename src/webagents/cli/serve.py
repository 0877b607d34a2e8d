"""`webagents serve` and `webagents daemon`: agents on the network, through uvicorn
(serving.py: the socket, the connection guard and uvicorn, shared with `portal serve`)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path

import click

from ..chat_completions import NO_ENDPOINT, OpenAIModel
from ..errors import ConfigError
from ..model import Model
from ..offline import OFFLINE_MEMORY_HINT, OFFLINE_NOTICE, OfflineModel
from ..portal_link.connect import Connector
from ..portal_link.login import AGENT_TOKEN_ENV, agent_key
from ..server import AgentHost, ServedAgent, create_app
from ..server.connection_limits import ConnectionLimits
from .serving import bind, connection_guard, serve_guarded


def run_server(
    host: AgentHost,
    sock: socket.socket,
    limits: ConnectionLimits,
    *,
    max_body_bytes: int,
    connector: Connector | None = None,
) -> None:
    logging.getLogger("webagents").setLevel(logging.INFO)
    address, port = sock.getsockname()[:2]
    shown = f"[{address}]" if ":" in address else address
    targets = connector.targets() if connector is not None else []
    portals = {target.agent: target.portal for target in targets}
    for served in host.all():
        click.echo(f"  {served.describe_access(portals.get(served.name))}")
        click.echo(f"  POST http://{shown}:{port}/agents/{served.name}/chat/completions")
    if connector is not None:
        for target in targets:
            click.echo(
                f"  Portal Connect: agent {target.agent!r} connects to {target.portal} "
                "(--no-connect serves locally only)"
            )
    guard = connection_guard(limits)
    # Each busy connection's request holds at most one connection to the model at a time;
    # the cap left a descriptor for each, which the model clients must not exceed.
    OpenAIModel.max_connections = guard.cap
    click.echo(f"webagents: serving at http://{shown}:{port}/v1 (Ctrl-C stops)", nl=True)
    app = create_app(
        host,
        max_body_bytes=max_body_bytes,
        connect=connector.run if connector is not None else None,
    )
    # The app has no WebSocket endpoint: Upgrade headers are ignored.
    serve_guarded(app, sock, guard, ws="none")


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
    max_connections: int,
    header_timeout: int,
    body_timeout: int,
    keep_alive_timeout: int,
    connect: bool | None = None,
) -> None:
    """Load what `make_host` serves, bind, say what is served and how, and serve it."""
    try:
        hosted, banner = make_host(path, OfflineModel() if offline else None, profile)
    except ConfigError as exc:
        if offline or NO_ENDPOINT not in str(exc):
            raise
        raise ConfigError(f"{exc}; or serve the offline scripted model: --offline") from None
    if offline:
        # The offline model keeps and lists notes when asked in these words (over HTTP too).
        has_memory = any(served.agent.skill("memory") is not None for served in hosted.all())
        click.echo(f"{OFFLINE_NOTICE}\n{OFFLINE_MEMORY_HINT}" if has_memory else OFFLINE_NOTICE)
    # --connect without a link (WEBAGENTS_AGENT_TOKEN) names one agent: serve's, not a daemon's.
    forced = bool(connect) and make_host is agent_host
    connector = None if connect is False else Connector(hosted, forced=forced, profile=profile)
    hosted.connects = connector is not None
    if connector is not None and forced:
        check_connectable(connector)
    sock = bind(host, port)
    click.echo(banner)
    limits = ConnectionLimits(
        max_connections=max_connections,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        keep_alive_timeout=keep_alive_timeout,
    )
    run_server(hosted, sock, limits, max_body_bytes=max_body_mb * 1024 * 1024, connector=connector)


def check_connectable(connector: Connector) -> None:
    """`serve --connect`: the agent can connect (a link or WEBAGENTS_AGENT_TOKEN), or why not."""
    for target in connector.targets():
        if agent_key(target.agent_id, connector.profile) is None:
            raise ConfigError(
                f"--connect: agent {target.agent!r} has no key for Portal Connect on this "
                f"machine: run webagents publish in its folder, or set {AGENT_TOKEN_ENV}"
            )
