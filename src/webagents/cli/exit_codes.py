"""Only the CLI turns errors into exit codes: 2 for something the user must fix in a file or
the environment, 1 for anything else that went wrong."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import AgentFileError, ConfigError, WebAgentsError


def run_or_exit(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a command body, turning webagents' errors into a message and an exit code."""
    try:
        return fn(*args, **kwargs)
    except (AgentFileError, ConfigError) as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(2)
    except WebAgentsError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(1)
