"""Where webagents keeps its state: `~/.webagents`, or `~/.webagents-NAME` under a profile.

This module is the only place that builds those paths. `WEBAGENTS_HOME` replaces
`~/.webagents` (tests use it); a profile then becomes `$WEBAGENTS_HOME-NAME`.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from .errors import ConfigError

_PROFILE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def validate_profile(profile: str) -> str:
    if not _PROFILE.fullmatch(profile):
        raise ConfigError(
            f"profile name {profile!r} is not allowed: use 1-64 characters of a-z 0-9 _ -, "
            "starting with a letter or digit (for example --profile work)"
        )
    return profile


def webagents_home(profile: str | None = None) -> Path:
    """The state folder: `~/.webagents` or, with a profile, `~/.webagents-<profile>`."""
    base = os.environ.get("WEBAGENTS_HOME")
    root = Path(base).expanduser() if base else Path.home() / ".webagents"
    if profile is None:
        return root
    return root.with_name(f"{root.name}-{validate_profile(profile)}")


def sessions_dir(profile: str | None = None) -> Path:
    return webagents_home(profile) / "sessions"


def chat_history_file(profile: str | None = None) -> Path:
    """The terminal chat's line history (what was typed at the prompt)."""
    return webagents_home(profile) / "chat-history"


def login_file(profile: str | None = None) -> Path:
    """`webagents login`'s sign-in: the portal, the user and the access token (0600)."""
    return webagents_home(profile) / "login.json"


def chat_outbox_dir(agent_id: str, profile: str | None = None) -> Path:
    """The owner's turns waiting to be recorded as chats of a published agent (P10)."""
    if not is_agent_id(agent_id):
        raise ConfigError(f"{agent_id!r} is not an agent id (a UUID): no outbox is kept for it")
    return webagents_home(profile) / "chat-outbox" / agent_id


def is_agent_id(value: object) -> bool:
    """A portal's agent id: a UUID in its canonical text (so it is safe in a file name and
    in a URL path, whatever a portal or a hand-edited link says)."""
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def agent_key_file(agent_id: str, profile: str | None = None) -> Path:
    """The platform key `webagents publish` received for an agent (0600): kept here, never
    in the agent's folder, where it could be committed with it."""
    if not is_agent_id(agent_id):
        raise ConfigError(f"{agent_id!r} is not an agent id (a UUID): no key is kept for it")
    return webagents_home(profile) / "agents" / f"{agent_id}.key"
