"""One memory for every process of an agent (SPEC P12, issue 23's acceptance), all real
processes: `webagents portal serve`, and two `webagents serve` of one published agent with
`memory: {local: false, portal: true}` on two machines (two homes, two copies of the folder,
each with its own key). Callers of the portal's public endpoint are spread across both (each
request's kept conversation shows which process served it); a note written through one is
read through the other, which pulls when the portal tells it that the memory changed (its
own timer is an hour: nothing else would bring the note within the test); one killed
(kill -9), the other serves every following request. On PostgreSQL and SQLite."""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.conftest import write_agent
from tests.e2e.conftest import child_env
from tests.e2e.serving import Process
from tests.openai_callers import caller as openai_caller
from webagents.portal.db.engine import make_engine
from webagents.portal.db.tables import AgentConnection
from webagents.portal.settings import PortalSettings
from webagents.sessions.store import agent_folder_name

from .connect_served_helpers import _ready
from .processes import Served
from .publish_helpers import _signed_in, webagents

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): two serve processes sharing
# one memory does not depend on the database beyond what the repository and app tests prove on
# both.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # the installed command

AGENT = """name: helper
skills:
  - memory:
      local: false
      portal: true
      sync_seconds: 3600
  - session
"""
GUARD = 60.0
"""The bound of each poll: a guard against a hang, not a measure (bench/memory_spread.py)."""


class Machine:
    """One `webagents serve` of the agent, with its own home and folder."""

    def __init__(self, tmp_path: Path, home: str, folder: Path) -> None:
        self.env = child_env(tmp_path)
        self.env["WEBAGENTS_HOME"] = str(tmp_path / home / ".webagents")
        self.folder = folder
        self.process = Process(["serve", str(folder), "--offline", "--port", "0"], self.env)

    def served(self, session: str) -> bool:
        """Whether this process kept the conversation `session` (it served it)."""
        home = Path(self.env["WEBAGENTS_HOME"])
        kept = home / "sessions" / agent_folder_name(self.folder) / "helper" / f"{session}.json"
        return kept.exists()


def _until(condition: Callable[[], bool], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, f"never within the guard: {what()}"
        time.sleep(0.05)


def test_p12_two_serve_processes_of_one_agent_share_one_memory_and_one_survives_the_other(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    alice = _signed_in(tmp_path, served, fresh_database_url, "alice", "home")
    a = write_agent(tmp_path / "a" / "helper", AGENT)
    assert webagents(tmp_path, "publish", str(a)).returncode == 0
    login = webagents(tmp_path, "login", "--portal", served.url, "--token", alice, home="homeb")
    assert login.returncode == 0, login.stderr
    b = tmp_path / "b" / "helper"
    b.mkdir(parents=True)
    shutil.copy(a / "AGENT.md", b / "AGENT.md")
    linked = webagents(tmp_path, "publish", str(b), "--key-name", "second", home="homeb")
    assert linked.returncode == 0, linked.stderr

    machines = [Machine(tmp_path, "home", a), Machine(tmp_path, "homeb", b)]
    caller = openai_caller(f"{served.url}/agents/helper", alice, max_retries=0, timeout=60)
    turn = iter(range(1000))

    def say(text: str) -> tuple[str, int]:
        """The reply, and which machine served it."""
        session = f"s{next(turn)}"
        reply = caller.chat.completions.create(
            model="helper",
            messages=[{"role": "user", "content": text}],
            metadata={"session_id": session},  # type: ignore[arg-type]
        )
        serving = [n for n, machine in enumerate(machines) if machine.served(session)]
        assert len(serving) == 1, serving
        return reply.choices[0].message.content or "", serving[0]

    def read_through(other: int, note: str) -> None:
        """Ask until a request lands on machine `other` and its answer lists `note`."""
        seen: list[tuple[str, int]] = []

        def read() -> bool:
            seen.append(say("what do you remember"))
            return seen[-1][1] == other and note in seen[-1][0]

        _until(read, lambda: f"{note!r} read through machine {other}: {seen}")

    try:
        for machine in machines:
            _ready(machine.process, served)
        writes = [say("remember that the launch is Friday")]
        read_through(1 - writes[0][1], "the launch is Friday")
        writes.append(say("remember that the budget is small"))
        while writes[-1][1] == writes[0][1]:  # the other machine writes the second note
            writes.append(say(f"remember that the budget is small {len(writes)}"))
        read_through(writes[0][1], "the budget is small")
        assert {machine for _, machine in writes} == {0, 1}  # both served callers

        machines[0].process.popen.send_signal(signal.SIGKILL)
        machines[0].process.popen.wait()
        _until(
            lambda: _connections(fresh_database_url) == 1,
            lambda: "the portal let the killed one's connection go",
        )
        after = [say(f"hello {n}") for n in range(6)]
        assert [machine for _, machine in after] == [1] * 6
        assert "the launch is Friday" in say("what do you remember")[0]
    finally:
        caller.close()
        for machine in machines:
            machine.process.stop()


def _connections(database: str) -> int:
    """The agent's connections the portal holds (every agent here is this one)."""
    engine = make_engine(PortalSettings(database_url=database))
    try:
        with engine.connect() as connection:
            return int(connection.scalar(select(func.count()).select_from(AgentConnection)) or 0)
    finally:
        engine.dispose()
