"""Which agents a server serves: one (`webagents serve`) or every folder under a root
(`webagents daemon`, see daemon.py), each with the verifier of its own `access:` block."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..access import AccessVerifier
from ..agent import Agent
from ..agent_file import load_agent
from ..caller import Caller, CallerKind
from ..errors import ConfigError
from ..model import Model
from ..skills.auth import AuthSkill, has_link

log = logging.getLogger("webagents.server")


@dataclass
class ServedAgent:
    agent: Agent
    verifier: AccessVerifier

    @classmethod
    def load(
        cls, folder: Path, *, model: Model | None = None, profile: str | None = None
    ) -> ServedAgent:
        """Load and check everything a request will need, so that mistakes show at start."""
        agent = load_agent(folder, model=model, profile=profile)
        agent.model  # noqa: B018 - a missing key is reported now, not at the first request
        access = agent.spec.access if agent.spec is not None else None
        auth = agent.skill(AuthSkill.name)
        portal = auth if isinstance(auth, AuthSkill) else None
        verifier = AccessVerifier(access, portal=portal)
        verifier.relay = portal or _relay_keys(agent)
        return cls(agent, verifier)

    @property
    def name(self) -> str:
        return self.agent.name

    @property
    def relay_portal(self) -> str | None:
        """The portal whose relayed callers this agent verifies (a published agent's): the
        one it connects to, unless the server was told not to (--no-connect)."""
        relay = self.verifier.relay
        return relay.portal if relay is not None else None

    @property
    def verifies_no_one(self) -> bool:
        """A3: no access: block and no auth skill, so every caller is anonymous."""
        return not self.verifier.configured and self.agent.skill("auth") is None

    def describe_access(self, relayed_by: str | None = None) -> str:
        """Who the agent verifies, for the serve banner; `relayed_by`: the portal it connects
        to, whose relayed callers arrive verified (A4) whatever the agent verifies itself."""
        if relayed_by is not None:
            relayed = (
                f"callers relayed by the portal {relayed_by} arrive verified (its user who "
                "owns the agent as the owner, other users as caller:<user>), with their notes "
                "and conversations kept"
            )
            if self.verifies_no_one:
                return (
                    f"agent {self.name!r}: {relayed}; it verifies no one who calls it here (it "
                    "has no access: block): they are anonymous, read shared notes, write "
                    "nothing, and none of their conversations is kept"
                )
            return f"agent {self.name!r} verifies callers by {self.verifier.describe()}; {relayed}"
        if self.verifies_no_one:
            return (
                f"agent {self.name!r} verifies no one (it has no access: block): every "
                "caller is anonymous, reads shared notes, writes nothing, and no "
                "conversation is kept"
            )
        return f"agent {self.name!r} verifies callers by {self.verifier.describe()}"

    async def aclose(self) -> None:
        await self.agent.aclose()
        await self.verifier.aclose()


def _relay_keys(agent: Agent) -> AuthSkill | None:
    """The portal keys that verify relayed requests for a published agent with no `auth`
    skill: the auth skill's verifier, bound to the folder's link, not added to the agent."""
    keys = AuthSkill()
    try:
        if not has_link(agent.info):
            return None
        keys.bind(agent.info)
    except ConfigError as exc:
        log.warning("agent %r cannot take relayed requests: %s", agent.name, exc)
        return None
    return keys


class AgentHost:
    """The agents a server answers for, by name."""

    def __init__(self, agents: list[ServedAgent] | None = None) -> None:
        self._agents = {served.name: served for served in agents or []}
        self.connects = True
        """Whether published agents connect to their portals (False with --no-connect): the
        lines that say who an agent verifies name the portal only then."""

    def describe_access(self, served: ServedAgent) -> str:
        """Who `served` verifies, as this server serves it (for lines logged while serving)."""
        return served.describe_access(served.relay_portal if self.connects else None)

    def get(self, name: str) -> ServedAgent | None:
        return self._agents.get(name)

    @property
    def sole(self) -> ServedAgent | None:
        """The agent that answers every request, whatever its `model` names: the one agent
        served, under `serve` and under a daemon that serves one just now (SPEC 6: clients
        and configurations written for a model provider send its model's name,
        "openai/gpt-4o-mini", and there is no other agent they could mean); None with
        several, where a request's `model` picks the agent."""
        if len(self._agents) == 1:
            return next(iter(self._agents.values()))
        return None

    def lists_for(self, served: ServedAgent, caller: Caller) -> bool:
        """Whether `served`'s name is shown to `caller` (its verifier verified them already).

        A caller it verified by a credential may call it, and sees it. An anonymous caller
        sees only the agents that verify no one: an agent with an `access:` block is meant
        for the callers it lists, and its name is not advertised to whoever asks (though
        anyone who knows a name can call it anonymously, reading its shared notes alone).
        With one agent served, any `model` reaches it and the reply names it anyway.
        """
        return (
            caller.kind is not CallerKind.ANONYMOUS or served.verifies_no_one or self.sole is served
        )

    def names(self) -> list[str]:
        return sorted(self._agents)

    def all(self) -> list[ServedAgent]:
        return [self._agents[name] for name in self.names()]

    async def run(self) -> None:
        """Background work while serving; a daemon watches its folders here."""

    async def aclose(self) -> None:
        for served in self._agents.values():
            await served.aclose()
