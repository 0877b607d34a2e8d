"""The memory store's quotas as `webagents portal serve` options (portal/settings.py).

The options store their values in the click context rather than in `serve`'s arguments, so
that the quotas travel as one `MemoryQuotas` and `serve`'s other options stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import click

from ..portal.settings import DEFAULT_QUOTAS, MB, OPTIONS, MemoryQuotas, parse_size

_KEY = "webagents.memory_quotas"
_HELP = {
    "agent_entries": "The most notes one agent keeps in the portal's memory store.",
    "agent_bytes": "The most bytes of notes one agent keeps (100MB, 512K, 1G).",
    "user_entries": "The most notes one user's agents keep together.",
    "user_bytes": "The most bytes of notes one user's agents keep together.",
    "versions_per_entry": "Versions kept of each note, its current one included (older ones "
    "are dropped, oldest first).",
    "agent_version_bytes": "The most bytes the versions of one agent's notes keep, forgotten "
    "notes' included (each note's current text too), until retention removes them.",
    "user_version_bytes": "The most bytes the versions of one user's agents' notes keep together.",
}


def _shown(name: str, value: int) -> str:
    return f"{value // MB}MB" if name.endswith("bytes") else str(value)


def _keep(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if name.endswith("bytes"):
            try:
                number = parse_size(str(value))
            except ValueError as exc:
                raise click.BadParameter(str(exc)) from None
        else:
            try:
                number = int(value)
            except ValueError:
                raise click.BadParameter(f"a whole number, not {value!r}") from None
            if number < 1:
                kept = (
                    " (the current version is always kept)" if name.startswith("versions") else ""
                )
                raise click.BadParameter(f"at least 1, not {number}{kept}")
        ctx.meta.setdefault(_KEY, {})[name] = number

    return keep


def memory_quota_options(fn: Any) -> Any:
    for spec in reversed(fields(MemoryQuotas)):
        name = spec.name
        option = OPTIONS[name]
        fn = click.option(
            option,
            envvar="WEBAGENTS_PORTAL_" + option.removeprefix("--").replace("-", "_").upper(),
            default=_shown(name, getattr(DEFAULT_QUOTAS, name)),
            show_default=True,
            metavar="SIZE" if name.endswith("bytes") else "N",
            help=_HELP[name],
            expose_value=False,
            callback=_keep(name),
        )(fn)
    return fn


def memory_quotas(ctx: click.Context) -> MemoryQuotas:
    """The quotas the options gave (each has a default)."""
    return MemoryQuotas(**ctx.meta.get(_KEY, {}))
