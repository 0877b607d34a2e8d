"""Which portal, and the sign-in `webagents login` keeps per profile (0600)."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass

from .._files import atomic_write
from ..errors import ConfigError
from ..home import agent_key_file, login_file

PORTAL_URL_ENV = "ROBUTLER_API_URL"
DEFAULT_PORTAL = "http://127.0.0.1:8700"
AGENT_TOKEN_ENV = "WEBAGENTS_AGENT_TOKEN"
"""The agent's platform key where `webagents publish` kept none on this machine."""


def agent_key(agent_id: str | None, profile: str | None) -> str | None:
    """The agent's platform key on this machine: the one `webagents publish` kept for the
    agent, else WEBAGENTS_AGENT_TOKEN (one variable cannot be the key of each agent a daemon
    serves, so a kept key wins); None when there is neither."""
    if agent_id is not None:
        with contextlib.suppress(FileNotFoundError):
            key = agent_key_file(agent_id, profile).read_text(encoding="utf-8").strip()
            if key:
                return key
    return os.environ.get(AGENT_TOKEN_ENV, "").strip() or None


def portal_url(given: str | None, remembered: str | None = None) -> str:
    """`--portal`, else ROBUTLER_API_URL, else the portal of the last login, else local."""
    url = given or os.environ.get(PORTAL_URL_ENV) or remembered or DEFAULT_PORTAL
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the portal address must start with http:// or https://, not {url!r}")
    return url.rstrip("/")


@dataclass(frozen=True)
class Login:
    """What `webagents login` keeps per profile (0600): the portal, who, and the token."""

    portal: str
    username: str
    user_id: str
    access_token: str


def load_login(profile: str | None) -> Login | None:
    path = login_file(profile)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Login(
            portal=str(data["portal"]),
            username=str(data["username"]),
            user_id=str(data["user_id"]),
            access_token=str(data["access_token"]),
        )
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"{path} is damaged (not the sign-in webagents login writes): "
            "run webagents logout, then webagents login"
        ) from None


def save_login(profile: str | None, login: Login) -> None:
    atomic_write(login_file(profile), (json.dumps(asdict(login), indent=2) + "\n").encode())


def forget_login(profile: str | None) -> bool:
    try:
        login_file(profile).unlink()
    except FileNotFoundError:
        return False
    return True
