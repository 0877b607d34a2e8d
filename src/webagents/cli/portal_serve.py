"""`webagents portal serve` and `webagents portal worker`: the portal's processes, the one
that answers requests and the one that runs its background jobs (portal/background.py)."""

from __future__ import annotations

from typing import Any

import click

from ..errors import ConfigError
from .connection_options import connection_options
from .memory_quotas import memory_quota_options, memory_quotas
from .portal_common import (
    GATE_DEFAULTS,
    database_option,
    embeddings_option,
    portal_settings,
    run_portal_command,
)
from .startup import paused_collector, serving

_SIGN_UP_SHOWN = {
    "open": "open (anyone who reaches the portal; --sign-up invite or closed to limit it)",
    "invite": "by invitation (make one with webagents portal invite)",
    "closed": "closed (add users with webagents portal adduser)",
}


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8700, show_default=True, help="Port (0: any free port).")
@click.option(
    "--public-url",
    envvar="WEBAGENTS_PORTAL_PUBLIC_URL",
    metavar="URL",
    help="The portal's address as clients reach it, the issuer of its tokens (default: the "
    "address it listens on, 127.0.0.1 when that is every address; never a request's Host).",
)
@click.option(
    "--forwarded-allow-ips",
    envvar="WEBAGENTS_PORTAL_FORWARDED_ALLOW_IPS",
    metavar="ADDRESSES",
    default="",
    help="The reverse proxies (comma-separated addresses or networks, '*' for any) whose "
    "X-Forwarded-For/-Proto are believed; by default none, so no client can pick the address "
    "its failed sign-ins are counted against.",
)
@embeddings_option(
    "The memory store's embedding model for semantic search: local (offline), "
    "openai[:MODEL] (an OpenAI-compatible /v1/embeddings endpoint), or none (full-text only)."
)
@click.option(
    "--sign-up",
    "sign_up",
    envvar="WEBAGENTS_PORTAL_SIGN_UP",
    metavar="open|invite|closed",
    default="open",
    show_default=True,
    help="Who may make an account on the sign-up page: anyone (open; a few accounts per "
    "address an hour), whoever holds an invitation from 'webagents portal invite' (invite), "
    "or nobody (closed: add users with 'webagents portal adduser').",
)
@click.option(
    "--max-db-requests",
    default=GATE_DEFAULTS.slots,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Requests working on the database at once (the connections it is given); the "
    "rest wait their turn.",
)
@click.option(
    "--max-db-waiting",
    default=GATE_DEFAULTS.waiting,
    show_default=True,
    type=click.IntRange(0),
    help=f"Requests waiting for the database at once (each {GATE_DEFAULTS.wait_seconds:g} s at "
    "most); more are answered 503 with Retry-After.",
)
@click.option(
    "--access-log/--no-access-log",
    envvar="WEBAGENTS_PORTAL_ACCESS_LOG",
    default=False,
    show_default=True,
    help="Log a line for every request answered. Off by default: under many clients the "
    "line costs the server's one event loop a good share of its time (a reverse proxy in "
    "front usually logs requests anyway).",
)
@click.option(
    "--background-jobs",
    "background_jobs",
    envvar="WEBAGENTS_PORTAL_BACKGROUND_JOBS",
    type=click.Choice(["in-process", "none"]),
    default="in-process",
    show_default=True,
    help="Where embedding notes and memory retention run: in this process, or none "
    "(`webagents portal worker` processes run them; on PostgreSQL any number).",
)
@memory_quota_options
@connection_options
@database_option
@click.pass_context
def serve(ctx: click.Context, /, **options: Any) -> None:
    """Serve the portal; its database is migrated first."""
    with paused_collector():  # until serve_guarded: see startup.py
        run_portal_command(_serve, ctx, options)


def _embedder(choice: str) -> Any:
    """The embedder `--embeddings` names, made now, so that a bad choice stops the start.

    `local` (the default) without the model's weights, as `pip install 'webagents[portal]'`
    leaves it: None, so that the portal starts with full-text search (`_shown_embeddings`
    says how to turn search by meaning on).
    """
    from ..errors import WebAgentsError
    from ..portal.embeddings import make_embedder
    from ..portal.embeddings.local import weights_installed

    if choice == "local" and not weights_installed():
        return None
    try:
        return make_embedder(choice)
    except WebAgentsError:
        raise
    except (ValueError, NotImplementedError, ImportError, OSError) as exc:
        raise ConfigError(
            f"--embeddings {choice}: {exc}; choose local, openai[:MODEL] or none "
            "(none: full-text search only)"
        ) from None


def _shown_embeddings(choice: str, embedder: Any) -> str:
    """The banner's `embeddings:` line: the model, or why search by meaning is off."""
    from ..portal.embeddings.local import weights_absent

    if embedder is not None:
        return f"  embeddings: {embedder.name}"
    absent = weights_absent(choice, embedder)
    if absent is not None:
        return f"  embeddings: none, full-text search only ({absent})"
    return "  embeddings: none (semantic search off)"


def _local_address(address: str, shown: str, port: int) -> str:
    """The address a portal without --public-url names itself by: the one it listens on, or
    127.0.0.1 when it listens on every address (0.0.0.0 or ::), which is no address to use."""
    if address in ("0.0.0.0", "::"):
        return f"http://127.0.0.1:{port}"
    return f"http://{shown}:{port}"


def _serve(ctx: click.Context, options: dict[str, Any]) -> None:
    from dataclasses import replace

    from ..portal.admin import open_database
    from ..portal.app import create_app
    from ..portal.background import ServingJobs
    from ..portal.connect.protocol import MAX_MESSAGE_BYTES
    from ..portal.settings import check_public_url, check_sign_up
    from ..server.connection_limits import ConnectionLimits
    from .serving import bind, connection_guard, serve_guarded

    host, port, embeddings = options["host"], options["port"], options["embeddings"]
    settings = replace(
        portal_settings(ctx, options["database"], options["profile"]),
        public_url=check_public_url(options["public_url"]),
        embeddings=embeddings,
        sign_up=check_sign_up(options["sign_up"]),
        memory_quotas=memory_quotas(ctx),
        db_gate=replace(
            GATE_DEFAULTS, slots=options["max_db_requests"], waiting=options["max_db_waiting"]
        ),
    )
    limits = ConnectionLimits(
        max_connections=options["max_connections"],
        header_timeout=options["header_timeout"],
        body_timeout=options["body_timeout"],
        keep_alive_timeout=options["keep_alive_timeout"],
    )
    embedder = _embedder(embeddings)
    engine = open_database(settings)
    sock = bind(host, port)
    address, bound = sock.getsockname()[:2]
    shown = f"[{address}]" if ":" in address else address
    if settings.public_url is None:
        # The tokens' issuer is fixed at start, never taken from a request's Host header.
        settings = replace(settings, public_url=_local_address(address, shown, bound))
        click.echo(
            f"  tokens' issuer: {settings.public_url} (no --public-url: clients must use this "
            "address; give --public-url when they reach the portal by another)"
        )
    else:
        click.echo(f"  tokens' issuer: {settings.public_url}")
    click.echo(f"  database: {settings.url.render_as_string(hide_password=True)}")
    click.echo(_shown_embeddings(embeddings, embedder))
    click.echo(f"  sign-up: {_SIGN_UP_SHOWN[settings.sign_up]}")
    gate = settings.db_gate
    click.echo(
        f"  database requests: {gate.slots} at once, {gate.waiting} more waiting "
        f"({gate.wait_seconds:g} s at most); beyond, 503 with Retry-After"
    )
    proxies = options["forwarded_allow_ips"].strip()
    app = create_app(settings, engine=engine, embedder=embedder, embedding_worker=False)
    # Embedding notes and memory retention (P5, P6): here, or in `portal worker` processes.
    jobs = ServingJobs(settings, app) if options["background_jobs"] == "in-process" else None
    click.echo(_shown_jobs(jobs, settings))
    guard = connection_guard(limits)
    click.echo(f"webagents portal: serving at http://{shown}:{bound} (Ctrl-C stops)")
    try:
        serve_guarded(
            app,
            sock,
            guard,
            ws="websockets-sansio",  # Portal Connect's /ws (websockets' maintained version)
            ws_max_size=MAX_MESSAGE_BYTES,
            # uvicorn would believe X-Forwarded-* from 127.0.0.1 (or $FORWARDED_ALLOW_IPS)
            # unasked: only the proxies the operator names are believed.
            proxy_headers=bool(proxies),
            forwarded_allow_ips=proxies or None,
            access_log=options["access_log"],
        )
    finally:
        if jobs is not None:
            jobs.stop()


def _shown_jobs(jobs: Any, settings: Any) -> str:
    """The banner's line on the background jobs (started now), with how to split them out."""
    if jobs is None:
        return "  background jobs: none here (run `webagents portal worker` beside it)"
    shown: str = jobs.start()
    if settings.is_sqlite:
        return shown
    return (
        f"{shown}; to run them apart, start with --background-jobs none and run "
        "`webagents portal worker`"
    )


@click.command()
@embeddings_option("The embedding model: the same as the portal serve's.")
@click.option(
    "--poll-seconds",
    "poll_seconds",
    envvar="WEBAGENTS_PORTAL_WORKER_POLL_SECONDS",
    type=click.FloatRange(min=0.01),
    default=None,
    help="How often the worker looks for new notes without being woken. Default: 2: the "
    "serving processes' writes wake it at once (PostgreSQL's notifications, SQLite's file "
    "watched), and the look finds what a wake lost while the worker reconnected.",
)
@database_option
@click.pass_context
def worker(
    ctx: click.Context,
    embeddings: str,
    poll_seconds: float | None,
    database: str | None,
    profile: str | None,
) -> None:
    """Run the portal's background jobs (embedding notes for semantic search, memory
    retention) in a process of their own, beside `portal serve --background-jobs none`.
    On PostgreSQL several workers share the work; on SQLite one process runs it."""
    with paused_collector():  # until its jobs start: see startup.py
        run_portal_command(_worker, ctx, embeddings, poll_seconds, database, profile)


def _worker(
    ctx: click.Context,
    embeddings: str,
    poll_seconds: float | None,
    database: str | None,
    profile: str | None,
) -> None:
    import signal

    from ..portal.admin import open_database
    from ..portal.background import Worker
    from ..portal.db.engine import make_sessions

    settings = portal_settings(ctx, database, profile)
    embedder = _embedder(embeddings)
    engine = open_database(settings)
    jobs = Worker(settings, make_sessions(engine), embedder, idle=poll_seconds)
    click.echo(f"  database: {settings.url.render_as_string(hide_password=True)}")
    click.echo(_shown_embeddings(embeddings, embedder))
    # SIGTERM (a service manager's stop) ends it as Ctrl-C does: the batch in hand is
    # finished or left due, never half stored.
    signal.signal(signal.SIGTERM, lambda *_: jobs.stop())
    serving()
    jobs.start()
    click.echo("webagents portal worker: running (Ctrl-C stops)")
    try:
        while not jobs.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        jobs.stop()
        engine.dispose()
    done = jobs.embedded
    click.echo(f"webagents portal worker: stopped; embedded {done} note{'' if done == 1 else 's'}")
