"""Test data for the memory store's tests: an owner, an agent of theirs with its key, the
agent's scope as the portal's auth makes it, and a deterministic fake embedder."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from webagents.portal.accounts.auth import agent_key_scope
from webagents.portal.agents import service as agents
from webagents.portal.agents.schemas import AgentIn
from webagents.portal.scope import AccountScope, AgentScope

from .conftest import make_account


@dataclass(frozen=True)
class Published:
    owner: AccountScope
    scope: AgentScope
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def publish(db: Session, owner: str = "alice", agent: str = "helper") -> Published:
    account = make_account(db, owner)
    return publish_for(db, account, agent)


def publish_for(db: Session, account: AccountScope, agent: str) -> Published:
    created = agents.create_agent(db, account, AgentIn(name=agent))
    db.commit()  # a savepoint released: a refused request's rollback keeps the agent
    key = created.rawApiKey
    return Published(account, agent_key_scope(db, f"Bearer {key}"), key)


# Words that mean one thing: a note and a query that share no word still meet here.
SENSES = {
    "dog": "canine",
    "puppy": "canine",
    "hound": "canine",
    "canine": "canine",
    "car": "vehicle",
    "automobile": "vehicle",
    "vehicle": "vehicle",
    "sedan": "vehicle",
    "holiday": "vacation",
    "vacation": "vacation",
    "trip": "vacation",
    "journey": "vacation",
    "budget": "money",
    "money": "money",
    "cash": "money",
    "spending": "money",
}
_DIMENSIONS = sorted(set(SENSES.values()))


class SynonymEmbedder:
    """Counts of senses (a word's sense from SENSES), normalised: deterministic meaning."""

    name = "test-synonyms-v1"
    dimensions = len(_DIMENSIONS) + 1

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in re.findall(r"[a-z]+", text.lower()):
            sense = SENSES.get(word)
            if sense is not None:
                vector[_DIMENSIONS.index(sense)] += 1.0
        if not any(vector):
            vector[-1] = 1.0  # no known sense: a direction of its own
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector]
