"""`webagents portal serve|worker|migrate|adduser|passwd|invite|apikey`: the self-hosted portal
(SPEC P1). The group and the account commands are here; the portal's processes (`serve`,
`worker`) in portal_serve.py, what they all share in portal_common.py.

The portal's packages are an extra (`pip install 'webagents[portal]'`), imported only when a
command runs, so that `webagents` works without them.
"""

from __future__ import annotations

import sys

import click

from .portal_common import database_option, portal_settings, run_portal_command
from .portal_serve import serve, worker


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


portal.add_command(serve)
portal.add_command(worker)


@portal.command()
@database_option
@click.pass_context
def migrate(ctx: click.Context, database: str | None, profile: str | None) -> None:
    """Bring the portal's database to the newest schema (serve does it too)."""
    run_portal_command(_migrate, ctx, database, profile)


def _migrate(ctx: click.Context, database: str | None, profile: str | None) -> None:
    from ..portal.admin import open_database
    from ..portal.db.migrate import current_revision

    settings = portal_settings(ctx, database, profile)
    engine = open_database(settings)
    shown = settings.url.render_as_string(hide_password=True)
    click.echo(f"webagents portal: {shown} is at revision {current_revision(engine)}")
    engine.dispose()


@portal.command()
@click.argument("username")
@database_option
@click.pass_context
def adduser(ctx: click.Context, username: str, database: str | None, profile: str | None) -> None:
    """Add a user; the password is asked for, or read from standard input's first line when
    it is not a terminal."""
    run_portal_command(_adduser, ctx, username, database, profile)


def _adduser(ctx: click.Context, username: str, database: str | None, profile: str | None) -> None:
    from ..portal.admin import add_user, open_database

    settings = portal_settings(ctx, database, profile)
    password = _new_password(username)
    engine = open_database(settings)
    try:
        scope = add_user(engine, username, password)
    finally:
        engine.dispose()
    click.echo(f"webagents portal: added user {scope.username} ({scope.user_id})")


@portal.command()
@click.argument("username")
@database_option
@click.pass_context
def passwd(ctx: click.Context, username: str, database: str | None, profile: str | None) -> None:
    """Set USERNAME's password (asked for without echo, or read from standard input's first
    line when it is not a terminal); every browser session and command-line sign-in of the
    user ends."""
    run_portal_command(_passwd, ctx, username, database, profile)


def _passwd(ctx: click.Context, username: str, database: str | None, profile: str | None) -> None:
    from ..portal.admin import open_database, set_password

    settings = portal_settings(ctx, database, profile)
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
@database_option
@click.pass_context
def invite(ctx: click.Context, days: int, database: str | None, profile: str | None) -> None:
    """Make an invitation to sign up, for a portal served with --sign-up invite; the code is
    printed on the last line (shown this once) and makes one account."""
    run_portal_command(_invite, ctx, days, database, profile)


def _invite(ctx: click.Context, days: int, database: str | None, profile: str | None) -> None:
    from datetime import timedelta

    from ..portal.admin import new_invite, open_database

    engine = open_database(portal_settings(ctx, database, profile))
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
@database_option
@click.pass_context
def apikey(
    ctx: click.Context, username: str, name: str, database: str | None, profile: str | None
) -> None:
    """Make a new API key for USERNAME and print it on the last line (shown this once)."""
    run_portal_command(_apikey, ctx, username, name, database, profile)


def _apikey(
    ctx: click.Context, username: str, name: str, database: str | None, profile: str | None
) -> None:
    from ..portal.admin import new_api_key, open_database

    engine = open_database(portal_settings(ctx, database, profile))
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
@database_option
@click.pass_context
def rotate_keys(
    ctx: click.Context, activate_in: int | None, database: str | None, profile: str | None
) -> None:
    """Make a new signing key for access tokens. Tokens signed with the old key stay valid
    until they expire; the old key is published until then."""
    run_portal_command(_rotate_keys, ctx, activate_in, database, profile)


def _rotate_keys(
    ctx: click.Context, activate_in: int | None, database: str | None, profile: str | None
) -> None:
    from datetime import timedelta

    from ..portal.admin import open_database, rotate_keys

    settings = portal_settings(ctx, database, profile)
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
