"""What the `webagents portal` commands share: the database options, the portal's settings,
and how a command's refusals become exit statuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..errors import ConfigError
from ..portal.db.gate import GateLimits
from .exit_codes import run_or_exit
from .profile_option import current_profile, profile_option

F = TypeVar("F", bound=Callable[..., Any])

# The database gate's defaults, for the options' (asyncio alone: no extra package needed).
GATE_DEFAULTS = GateLimits()


def database_option(fn: Any) -> Any:
    fn = click.option(
        "--database",
        metavar="URL",
        help="sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST/DB "
        "(default: WEBAGENTS_PORTAL_DATABASE_URL, else ~/.webagents/portal/portal.db).",
    )(fn)
    return profile_option(fn)


def embeddings_option(help: str) -> Callable[[F], F]:
    """`--embeddings`, as `portal serve` and `portal worker` take it (the same model for both)."""
    option: Callable[[F], F] = click.option(
        "--embeddings",
        envvar="WEBAGENTS_PORTAL_EMBEDDINGS",
        metavar="local|openai[:MODEL]|none",
        default="local",
        show_default=True,
        help=help,
    )
    return option


def portal_settings(ctx: click.Context, database: str | None, profile: str | None) -> Any:
    try:
        from ..portal.settings import resolve_settings
    except ImportError as exc:
        raise ConfigError(
            f"the portal needs its extra packages ({exc.name} is missing): "
            "pip install 'webagents[portal]'"
        ) from None
    return resolve_settings(database, profile=current_profile(ctx, profile))


def run_portal_command(fn: Any, *args: Any) -> None:
    """Run a command body: the portal's refusals (no such user, a name taken, a weak
    password) are something for the user to fix, status 2 like a bad argument."""
    from ..portal.errors import PortalError

    def refusals_to_fix() -> None:
        try:
            fn(*args)
        except PortalError as exc:
            raise ConfigError(exc.message) from None

    run_or_exit(refusals_to_fix)
