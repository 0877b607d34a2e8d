"""The options that bound a server's connections (server/connection_limits.py), one definition for
every server the project runs: `serve`, `daemon` and `portal serve`."""

from __future__ import annotations

from typing import Any

import click


def connection_options(fn: Any) -> Any:
    """--max-connections, --header-timeout, --body-timeout, --keep-alive-timeout."""
    fn = click.option(
        "--max-connections",
        default=1000,
        show_default=True,
        type=click.IntRange(1),
        help="Most connections open at once (fewer if the file limit, ulimit -n, needs it); "
        "beyond it the longest-idle one is closed, or 503 if all are busy.",
    )(fn)
    fn = click.option(
        "--header-timeout",
        default=10,
        show_default=True,
        type=click.IntRange(1, 3600),
        help="Seconds a connection has to send a whole request head before it is closed.",
    )(fn)
    fn = click.option(
        "--body-timeout",
        default=30,
        show_default=True,
        type=click.IntRange(1, 3600),
        help="Seconds a request's body may take to arrive, from its head; later is a 408.",
    )(fn)
    fn = click.option(
        "--keep-alive-timeout",
        default=5,
        show_default=True,
        type=click.IntRange(1, 3600),
        help="Seconds an idle connection is kept open after a response.",
    )(fn)
    return fn
