"""`webagents publish [PATH]` (SPEC P4): create the agent on the portal this profile is
signed in to, or update it when the folder is linked already, or when the signed-in user
has an agent of that name (the same agent, published from another machine).

Each profile (each machine) holds its own agent key, named after the machine: a publish
that finds no usable key here (none kept, or one revoked on the portal) asks for a new one,
and the other machines' keys keep working.

The link (`.webagents/config.json`: `link.agentId`, `link.agentName`) lives in the agent's
folder; the agent's key lives under the profile (0600), never in the folder.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import click

from .._files import atomic_write
from ..agent_file import load_spec
from ..caller import OWNER_NAMESPACE
from ..errors import ConfigError
from ..home import agent_key_file, is_agent_id
from ..portal_link.client import PortalClient
from ..portal_link.errors import Refused, SignInError
from ..portal_link.login import load_login
from .exit_codes import run_or_exit
from .profile_option import current_profile, profile_option


def _config_file(folder: Path) -> Path:
    return folder / ".webagents" / "config.json"


def _read_config(folder: Path) -> dict[str, Any]:
    path = _config_file(folder)
    if not path.exists():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}): fix or remove it") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} must hold a JSON object: fix or remove it")
    return config


def _payload(folder: Path) -> dict[str, Any]:
    spec = load_spec(folder)
    skills: list[Any] = [
        entry.name if not entry.settings else {entry.name: entry.settings} for entry in spec.skills
    ]
    return {
        "name": spec.name,
        "description": spec.description,
        "instructions": spec.instructions,
        "model": spec.model,
        "skills": skills,
    }


def _check_answer(agent: Any, portal: str) -> None:
    """The agent a portal answered with, before its id names a file or a link: a portal
    (or whoever answers in its place over plain http) chooses that text."""
    if not isinstance(agent, dict) or not is_agent_id(agent.get("id")):
        shown = agent.get("id") if isinstance(agent, dict) else agent
        raise ConfigError(
            f"the portal at {portal} answered an agent id that is not a UUID ({shown!r}): "
            "nothing was kept; is that address really a webagents portal? Sign in to yours "
            "with webagents login --portal URL"
        )
    if not isinstance(agent.get("name"), str):
        raise ConfigError(f"the portal at {portal} answered an agent without a name")


def _raw_key(answer: Any, portal: str) -> bytes:
    """The agent key a portal answered, as the key file keeps it."""
    raw = answer.get("rawApiKey") if isinstance(answer, dict) else None
    if not isinstance(raw, str) or not raw.strip() or "\n" in raw:
        raise ConfigError(
            f"the portal at {portal} answered no usable agent key: nothing was kept; is that "
            "address really a webagents portal? Sign in to yours with webagents login --portal URL"
        )
    return (raw.strip() + "\n").encode()


def default_key_name() -> str:
    """The name this machine's agent key gets on the portal: its host name."""
    return socket.gethostname().strip()[:100] or "this machine"


def _owned_named(client: PortalClient, name: str, portal: str) -> str | None:
    """The id of the signed-in user's agent called `name`, if there is one (a folder not
    linked here, on another machine, for an agent published from the first)."""
    for agent in client.list_agents():
        if isinstance(agent, dict) and agent.get("name") == name:
            _check_answer(agent, portal)
            return str(agent["id"])
    return None


def _key_works(portal: str, key_file: Path) -> bool:
    """Does the key this profile kept still open the agent's store (it may be revoked)?"""
    try:
        key = key_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return False
    if not key:
        return False
    with PortalClient(portal, key) as probe:
        try:
            probe.memory_list([OWNER_NAMESPACE], limit=1)
        except SignInError:
            return False
    return True


def run_publish(path: Path, profile: str | None, key_name: str | None = None) -> None:
    kept = load_login(profile)
    if kept is None:
        raise SignInError("not signed in to a portal: run webagents login")
    folder = path.resolve()
    payload = _payload(folder)
    config = _read_config(folder)
    link = config.get("link") if isinstance(config.get("link"), dict) else None
    if link and link.get("agentId") and not is_agent_id(link["agentId"]):
        raise ConfigError(
            f"{_config_file(folder)}: link.agentId {link['agentId']!r} is not an agent id (a "
            'UUID): fix it, or remove "link" to publish the agent anew'
        )
    name = key_name if key_name is not None else default_key_name()
    with PortalClient(kept.portal, kept.access_token) as client:
        agent_id = str(link["agentId"]) if link and link.get("agentId") else None
        if agent_id is None:
            agent_id = _owned_named(client, str(payload["name"]), kept.portal)
        if agent_id is not None:
            try:
                agent = client.update_agent(agent_id, payload)["agent"]
            except Refused as exc:
                if exc.status != 404:
                    raise
                raise ConfigError(
                    f"the portal does not know agent {agent_id} as yours ({kept.username} "
                    f"at {kept.portal}): sign in as its owner (webagents login), or remove "
                    f'"link" from '
                    f"{_config_file(folder)} to publish it anew"
                ) from None
            _check_answer(agent, kept.portal)
            key_file = agent_key_file(str(agent["id"]), profile)
            had_key = key_file.exists()
            if had_key and _key_works(kept.portal, key_file):
                said, after = f"updated {agent['name']}", ""
            else:
                made = client.add_agent_key(str(agent["id"]), name)
                atomic_write(key_file, _raw_key(made, kept.portal))
                if had_key:
                    said = f"updated {agent['name']}"
                    after = f"; this machine's key was revoked, so it has a new one ({name!r})"
                else:
                    said = f"linked to your existing agent {agent['name']!r}"
                    after = f"; this machine has its own key ({name!r})"
        else:
            created = client.create_agent({**payload, "keyName": name})
            agent = created["agent"]
            _check_answer(agent, kept.portal)
            atomic_write(agent_key_file(str(agent["id"]), profile), _raw_key(created, kept.portal))
            said, after = f"published {agent['name']}", ""
    config["link"] = {
        "agentId": str(agent["id"]),
        "agentName": str(agent["name"]),
        "portal": kept.portal,
    }
    atomic_write(_config_file(folder), (json.dumps(config, indent=2) + "\n").encode())
    click.echo(f"webagents: {said} on {kept.portal} (agent {agent['id']}){after}")


@click.command()
@click.argument("path", default=".", type=click.Path(path_type=Path))
@click.option(
    "--key-name",
    metavar="NAME",
    help="The name of this machine's agent key on the portal (default: the host name).",
)
@profile_option
@click.pass_context
def publish(ctx: click.Context, path: Path, key_name: str | None, profile: str | None) -> None:
    """Publish the agent in PATH on the portal you are signed in to (webagents login);
    a folder published before is updated. On another machine, the same agent is linked and
    this machine gets its own key."""
    run_or_exit(run_publish, path, current_profile(ctx, profile), key_name)
