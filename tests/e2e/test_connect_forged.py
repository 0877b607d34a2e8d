"""Portal Connect with a real `webagents serve` process (SPEC A4, P12): its banner names the
portal and, once connected, the public URL; relays whose assertion is signed by another key,
for another agent, expired, replayed or missing are answered 401 and never served, while a
valid one is served as the portal user it names. The portal here is the fake one of
tests/connect_portal.py, which can sign whatever a forger would."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from tests.conftest import write_agent
from tests.connect_portal import FakePortal, new_key
from webagents.home import agent_key_file

from .conftest import child_env
from .serving import Process

KEY = "rak_e2e-agent-key"
BODY = {"model": "helper", "messages": [{"role": "user", "content": "remember that bob likes tea"}]}


async def test_a4_a_served_agent_refuses_forged_relays_and_serves_a_valid_one(
    tmp_path: Path,
) -> None:
    agent_id = str(uuid.uuid4())
    portal = await FakePortal(agent_id, KEY).start()
    folder = write_agent(tmp_path / "helper", "name: helper\nskills:\n  - memory")
    (folder / ".webagents").mkdir()
    link = {"agentId": agent_id, "agentName": "helper", "portal": portal.url}
    (folder / ".webagents" / "config.json").write_text(json.dumps({"link": link}))
    env = child_env(tmp_path)
    key_file = agent_key_file(agent_id)  # this test's home is the child's (child_env)
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_text(KEY + "\n")
    process = await asyncio.to_thread(
        Process, ["serve", str(folder), "--offline", "--port", "0"], env
    )
    try:
        await asyncio.wait_for(portal.connected.wait(), 60)
        replayed = portal.assertion()
        valid = await portal.relay(BODY, replayed)
        forged = {
            "another key": portal.assertion(key=new_key()),
            "another agent": portal.assertion(aud=f"agent:{uuid.uuid4()}"),
            "expired": portal.assertion(iat=1_000_000, exp=1_000_060),
            "replayed": replayed,
            "none": None,
        }
        answers = {}
        for why, assertion in forged.items():
            reply = await portal.relay(BODY, assertion)
            answers[why] = (reply.status, reply.json()["error"]["message"])
        await asyncio.to_thread(process.wait_until, lambda: "callers reach it at" in process.output)
    finally:
        await asyncio.to_thread(process.stop)
        await portal.stop()
    assert valid.status == 200, valid
    assert answers == {
        "another key": (401, "the relay assertion does not verify (Signature verification failed)"),
        "another agent": (401, "the relay assertion is for another agent (audience)"),
        "expired": (401, "the relay assertion has expired: get a new one"),
        "replayed": (401, "the relay assertion was used before (replayed jti)"),
        "none": (401, "a relayed request needs the portal's assertion"),
    }
    memory = folder / ".webagents" / "memory"
    notes = sorted(memory.rglob("*.md"))
    assert len(notes) == 1 and "bob likes tea" in notes[0].read_text()
    assert (notes[0].parent / ".namespace").read_text() == "caller:bob"
    assert (
        f"  Portal Connect: agent 'helper' connects to {portal.url} (--no-connect serves "
        "locally only)\n" in process.output
    )
    assert (
        f"INFO webagents.connect: agent 'helper': connected to the portal {portal.url} (Portal "
        f"Connect): callers reach it at {portal.url}/agents/helper/chat/completions\n"
        in process.output
    )
