"""The `--profile` option every command takes, and which profile is in force."""

from __future__ import annotations

from typing import Any

import click

from ..errors import ConfigError
from ..home import validate_profile


def _check_profile(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return validate_profile(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


def profile_option(fn: Any) -> Any:
    return click.option(
        "--profile",
        callback=_check_profile,
        help="Keep all state in ~/.webagents-NAME instead of ~/.webagents.",
    )(fn)


def current_profile(ctx: click.Context, own: str | None) -> str | None:
    """A command's own --profile, else the one given before the command."""
    return own if own is not None else ctx.find_root().params.get("profile")
