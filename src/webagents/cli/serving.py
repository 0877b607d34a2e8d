"""The servers' plumbing, shared by `serve`, `daemon` and `portal serve`: the listening
socket, the connection guard and uvicorn run within it. Nothing of an agent or of the portal:
`portal serve` imports this, not serve.py (the agent's model clients, Portal Connect)."""

from __future__ import annotations

import errno
import logging
import socket
from typing import Any

import click
import uvicorn
from starlette.types import ASGIApp

from ..server.connection_limits import ConnectionGuard, ConnectionLimits, connection_cap, file_limit
from ..server.flood import AcceptErrors
from .startup import serving

LISTEN_BACKLOG = 2048  # uvicorn's default


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
        hint = ""
        if exc.errno == errno.EADDRINUSE:
            hint = (
                f"; another program (another webagents serve?) is using port {port}: "
                "choose another with --port, or --port 0 for any free one"
            )
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror}{hint}"
        ) from None
    # Listening now, before the address is printed: a client that connects as soon as it
    # reads it waits in the backlog while the server starts, instead of being refused.
    sock.listen(LISTEN_BACKLOG)
    return sock


def connection_guard(limits: ConnectionLimits) -> ConnectionGuard:
    """The guard of `limits`, its cap fitted to the file limit, and the line that says so."""
    files = file_limit()
    requested = limits.max_connections
    cap = connection_cap(requested, files)
    if cap < 1:
        raise click.ClickException(
            f"the file limit (ulimit -n) of {files} leaves no room for connections: raise it"
        )
    fitted = ""
    if cap < requested:
        fitted = f" (ulimit -n {files} allows fewer than --max-connections {requested})"
    click.echo(
        f"  connections: at most {cap} open{fitted}; a request head within "
        f"{limits.header_timeout:g} s, its body within {limits.body_timeout:g} s more; idle "
        f"ones closed after {limits.keep_alive_timeout} s"
    )
    return ConnectionGuard(limits, cap)


def serve_guarded(
    app: ASGIApp, sock: socket.socket, guard: ConnectionGuard, **options: Any
) -> None:
    """Serve `app` through uvicorn on `sock` within `guard`'s bounds (`options`: uvicorn's
    others). Every server of the project (serve, daemon, portal serve) runs through here."""
    logging.getLogger("asyncio").addFilter(AcceptErrors(file_limit()))
    serving()  # the start is over: see startup.py
    config = uvicorn.Config(
        app,
        http=guard.protocol(),
        timeout_keep_alive=guard.limits.keep_alive_timeout,
        log_level="info",
        timeout_graceful_shutdown=10,
        **options,
    )
    uvicorn.Server(config).run(sockets=[guard.listen_on(sock)])
