"""The store's names (SPEC P5): any namespace the agent can name is one the store takes, and
entry ids are the uuid5 the contract gives, distinct for distinct (namespace, key)."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from webagents.caller import Caller
from webagents.portal.memory.schemas import check_namespace, entry_id

AGENT = uuid.UUID("12345678-1234-5678-1234-567812345678")


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=20))
def test_p5_every_namespace_a_caller_names_is_accepted(identity: str, other: str) -> None:
    for caller in (
        Caller.verified(identity),
        Caller.verified(identity, issuer=other),
        Caller.channel(other, identity),
    ):
        namespace = caller.namespace
        if namespace is not None:
            assert check_namespace(namespace) == namespace


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_p5_entry_ids_are_the_contracts_uuid5_and_never_collide(a: str, b: str) -> None:
    assert entry_id(AGENT, "owner", a) == uuid.uuid5(uuid.NAMESPACE_URL, f"{AGENT}\nowner\n{a}")
    assert (entry_id(AGENT, "owner", a) == entry_id(AGENT, "owner", b)) == (a == b)
    assert entry_id(AGENT, f"caller:{a}", "k") != entry_id(AGENT, f"caller:{a}x", "k")
