"""`webagents portal serve|worker|migrate|adduser|passwd|invite|apikey`: the self-hosted portal
(SPEC P1).

The portal's packages are an extra (`pip install 'webagents[portal]'`), imported only when a
command runs, so that `webagents` works without them.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import ConfigError
from ..portal.db.gate import GateLimits
from .connection_options import connection_options
from .exit_codes import run_or_exit
from .memory_quotas import memory_quota_options, memory_quotas
from .profile_option import current_profile, profile_option

# The database gate's defaults, for the options' (asyncio alone: no extra package needed).
_GATE = GateLimits()


def _database_option(fn: Any) -> Any:
    fn = click.option(
        "--database",
        metavar="URL",
        help="sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST/DB "
        "(default: WEBAGENTS_PORTAL_DATABASE_URL, else ~/.webagents/portal/portal.db).",
    )(fn)
    return profile_option(fn)


def _settings(ctx: click.Context, database: str | None, profile: str | None) -> Any:
    try:
        from ..portal.settings import resolve_settings
    except ImportError as exc:
        raise ConfigError(
            f"the portal needs its extra packages ({exc.name} is missing): "
            "pip install 'webagents[portal]'"
        ) from None
    return resolve_settings(database, profile=current_profile(ctx, profile))


def _run(fn: Any, *args: Any) -> None:
    """Run a command body: the portal's refusals (no such user, a name taken, a weak
    password) are something for the user to fix, status 2 like a bad argument."""
    from ..portal.errors import PortalError

    def refusals_to_fix() -> None:
        try:
            fn(*args)
        except PortalError as exc:
            raise ConfigError(exc.message) from None

    run_or_exit(refusals_to_fix)


_SIGN_UP_SHOWN = {
    "open": "open (anyone who reaches the portal; --sign-up invite or closed to limit it)",
    "invite": "by invitation (make one with webagents portal invite)",
    "closed": "closed (add users with webagents portal adduser)",
}


def _new_password(username: str) -> str:
    """Asked for twice without echo at a terminal; else standard input's first line."""
    if sys.stdin.isatty():
        password: str = click.prompt(
            f"Password for {username}", hide_input=True, confirmation_prompt=True
        )
        return password
    return sys.stdin.readline().rstrip("\r\n")


@click.group()
def portal() -> None:
    """The self-hosted portal: accounts, API keys, access tokens, published agents."""


@portal.command()
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
@click.option(
    "--embeddings",
    envvar="WEBAGENTS_PORTAL_EMBEDDINGS",
    metavar="local|openai[:MODEL]|none",
    default="local",
    show_default=True,
    help="The memory store's embedding model for semantic search: local (offline), "
    "openai[:MODEL] (an OpenAI-compatible /v1/embeddings endpoint), or none (full-text only).",
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
    default=_GATE.slots,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Requests working on the database at once (the connections it is given); the "
    "rest wait their turn.",
)
@click.option(
    "--max-db-waiting",
    default=_GATE.waiting,
    show_default=True,
    type=click.IntRange(0),
    help=f"Requests waiting for the database at once (each {_GATE.wait_seconds:g} s at "
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
@_database_option
@click.pass_context
def serve(ctx: click.Context, /, **options: Any) -> None:
    """Serve the portal; its database is migrated first."""
    _run(_serve, ctx, options)


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
    from .serve import bind, connection_guard, serve_guarded

    host, port, embeddings = options["host"], options["port"], options["embeddings"]
    settings = replace(
        _settings(ctx, options["database"], options["profile"]),
        public_url=check_public_url(options["public_url"]),
        embeddings=embeddings,
        sign_up=check_sign_up(options["sign_up"]),
        memory_quotas=memory_quotas(ctx),
        db_gate=replace(_GATE, slots=options["max_db_requests"], waiting=options["max_db_waiting"]),
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


@portal.command()
@click.option(
    "--embeddings",
    envvar="WEBAGENTS_PORTAL_EMBEDDINGS",
    metavar="local|openai[:MODEL]|none",
    default="local",
    show_default=True,
    help="The embedding model: the same as the portal serve's.",
)
@_database_option
@click.pass_context
def worker(ctx: click.Context, embeddings: str, database: str | None, profile: str | None) -> None:
    """Run the portal's background jobs (embedding notes for semantic search, memory
    retention) in a process of their own, beside `portal serve --background-jobs none`.
    On PostgreSQL several workers share the work; on SQLite one process runs it."""
    _run(_worker, ctx, embeddings, database, profile)


def _worker(ctx: click.Context, embeddings: str, database: str | None, profile: str | None) -> None:
    import signal

    from ..portal.admin import open_database
    from ..portal.background import Worker
    from ..portal.db.engine import make_sessions

    settings = _settings(ctx, database, profile)
    embedder = _embedder(embeddings)
    engine = open_database(settings)
    jobs = Worker(settings, make_sessions(engine), embedder)
    click.echo(f"  database: {settings.url.render_as_string(hide_password=True)}")
    click.echo(_shown_embeddings(embeddings, embedder))
    # SIGTERM (a service manager's stop) ends it as Ctrl-C does: the batch in hand is
    # finished or left due, never half stored.
    signal.signal(signal.SIGTERM, lambda *_: jobs.stop())
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


@portal.command()
@_database_option
@click.pass_context
def migrate(ctx: click.Context, database: str | None, profile: str | None) -> None:
    """Bring the portal's database to the newest schema (serve does it too)."""
    _run(_migrate, ctx, database, profile)


def _migrate(ctx: click.Context, database: str | None, profile: str | None) -> None:
    from ..portal.admin import open_database
    from ..portal.db.migrate import current_revision

    settings = _settings(ctx, database, profile)
    engine = open_database(settings)
    shown = settings.url.render_as_string(hide_password=True)
    click.echo(f"webagents portal: {shown} is at revision {current_revision(engine)}")
    engine.dispose()


@portal.command()
@click.argument("username")
@_database_option
@click.pass_context
def adduser(ctx: click.Context, username: str, database: str | None, profile: str | None) -> None:
    """Add a user; the password is asked for, or read from standard input's first line when
    it is not a terminal."""
    _run(_adduser, ctx, username, database, profile)


def _adduser(ctx: click.Context, username: str, database: str | None, profile: str | None) -> None:
    from ..portal.admin import add_user, open_database

    settings = _settings(ctx, database, profile)
    password = _new_password(username)
    engine = open_database(settings)
    try:
        scope = add_user(engine, username, password)
    finally:
        engine.dispose()
    click.echo(f"webagents portal: added user {scope.username} ({scope.user_id})")


@portal.command()
@click.argument("username")
@_database_option
@click.pass_context
def passwd(ctx: click.Context, username: str, database: str | None, profile: str | None) -> None:
    """Set USERNAME's password (asked for without echo, or read from standard input's first
    line when it is not a terminal); every browser session and command-line sign-in of the
    user ends."""
    _run(_passwd, ctx, username, database, profile)


def _passwd(ctx: click.Context, username: str, database: str | None, profile: str | None) -> None:
    from ..portal.admin import open_database, set_password

    settings = _settings(ctx, database, profile)
    password = _new_password(username)
    engine = open_database(settings)
    try:
        scope = set_password(engine, username, password)
    finally:
        engine.dispose()
    click.echo(
        f"webagents portal: new password for {scope.username}; every session and "
        "command-line sign-in of the user was ended"
    )


@portal.command()
@click.option(
    "--days",
    type=click.IntRange(1, 365),
    default=7,
    show_default=True,
    help="How long the invitation is good for.",
)
@_database_option
@click.pass_context
def invite(ctx: click.Context, days: int, database: str | None, profile: str | None) -> None:
    """Make an invitation to sign up, for a portal served with --sign-up invite; the code is
    printed on the last line (shown this once) and makes one account."""
    _run(_invite, ctx, days, database, profile)


def _invite(ctx: click.Context, days: int, database: str | None, profile: str | None) -> None:
    from datetime import timedelta

    from ..portal.admin import new_invite, open_database

    engine = open_database(_settings(ctx, database, profile))
    try:
        code, expires = new_invite(engine, timedelta(days=days))
    finally:
        engine.dispose()
    click.echo(
        "webagents portal: an invitation for one account, good until "
        f"{expires.isoformat(timespec='minutes')} (enter it on the sign-up page, or open "
        "/signup?invite=CODE; shown once):"
    )
    click.echo(code)


@portal.command()
@click.argument("username")
@click.option("--name", default="command line", show_default=True, help="The key's name.")
@_database_option
@click.pass_context
def apikey(
    ctx: click.Context, username: str, name: str, database: str | None, profile: str | None
) -> None:
    """Make a new API key for USERNAME and print it on the last line (shown this once)."""
    _run(_apikey, ctx, username, name, database, profile)


def _apikey(
    ctx: click.Context, username: str, name: str, database: str | None, profile: str | None
) -> None:
    from ..portal.admin import new_api_key, open_database

    engine = open_database(_settings(ctx, database, profile))
    try:
        made = new_api_key(engine, username, name)
    finally:
        engine.dispose()
    click.echo(f"webagents portal: new API key {made.api_key.name!r} for {username} (shown once):")
    click.echo(made.key)


@portal.command("rotate-keys")
@click.option(
    "--activate-in",
    type=click.IntRange(0),
    default=None,
    metavar="SECONDS",
    help="Publish the new key now and sign with it after SECONDS (default: 600, longer than "
    "verifiers may keep the old key list).",
)
@_database_option
@click.pass_context
def rotate_keys(
    ctx: click.Context, activate_in: int | None, database: str | None, profile: str | None
) -> None:
    """Make a new signing key for access tokens. Tokens signed with the old key stay valid
    until they expire; the old key is published until then."""
    _run(_rotate_keys, ctx, activate_in, database, profile)


def _rotate_keys(
    ctx: click.Context, activate_in: int | None, database: str | None, profile: str | None
) -> None:
    from datetime import timedelta

    from ..portal.admin import open_database, rotate_keys

    settings = _settings(ctx, database, profile)
    engine = open_database(settings)
    try:
        delay = None if activate_in is None else timedelta(seconds=activate_in)
        key = rotate_keys(engine, settings, delay)
    finally:
        engine.dispose()
    click.echo(
        f"webagents portal: new signing key {key.kid}, published now, signing from "
        f"{key.activates_at.isoformat(timespec='seconds')}"
    )
