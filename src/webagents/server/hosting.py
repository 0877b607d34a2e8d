"""Which agents a server serves: one (`webagents serve`) or every folder under a root
(`webagents daemon`, see daemon.py), each with the verifier of its own `access:` block."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..access import AccessVerifier
from ..agent import Agent
from ..agent_file import load_agent
from ..model import Model

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
        return cls(agent, AccessVerifier(access))

    @property
    def name(self) -> str:
        return self.agent.name

    @property
    def verifies_no_one(self) -> bool:
        """A3: no access: block and no auth skill, so every caller is anonymous."""
        return not self.verifier.configured and self.agent.skill("auth") is None

    def describe_access(self) -> str:
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


class AgentHost:
    """The agents a server answers for, by name."""

    def __init__(self, agents: list[ServedAgent] | None = None) -> None:
        self._agents = {served.name: served for served in agents or []}

    def get(self, name: str) -> ServedAgent | None:
        return self._agents.get(name)

    def names(self) -> list[str]:
        return sorted(self._agents)

    def all(self) -> list[ServedAgent]:
        return [self._agents[name] for name in self.names()]

    async def run(self) -> None:
        """Background work while serving; a daemon watches its folders here."""

    async def aclose(self) -> None:
        for served in self._agents.values():
            await served.aclose()
