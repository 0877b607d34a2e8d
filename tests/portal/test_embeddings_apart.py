"""The local model's batches in a child process (embeddings/apart.py: the in-process embedding
worker's, P5): the same vectors as in the serving process; a child that dies fails its batch
with EmbeddingError and the next batch starts another; closed, or its parent killed, it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from webagents.portal.embeddings import EmbeddingError
from webagents.portal.embeddings.apart import ApartEmbedder
from webagents.portal.embeddings.local import LocalEmbedder

from .processes import Served
from .worker_helpers import URL, make_agent, until

TEXTS = ["a puppy named rex", "", "my sedan is blue", "\ud800 a lone surrogate", "x " * 400]


@pytest.fixture
def apart() -> Iterator[ApartEmbedder]:
    embedder = ApartEmbedder()
    yield embedder
    embedder.close()


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name: state, parent's pid, ..."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        # A child of this process that ended but is not reaped yet is a zombie: ended.
        return _stat(pid)[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def test_p5_apart_embeddings_are_the_local_models_own(apart: ApartEmbedder) -> None:
    assert (apart.name, apart.dimensions) == (LocalEmbedder.name, LocalEmbedder.dimensions)
    assert apart.embed([]) == []
    assert apart.child_pid is None  # nothing to embed: no child started
    here = LocalEmbedder().embed(TEXTS)
    there = apart.embed(TEXTS)
    assert apart.child_pid is not None and apart.child_pid != os.getpid()
    assert len(there) == len(TEXTS)
    pairs = zip(here, there, strict=True)
    largest = max(abs(x - y) for a, b in pairs for x, y in zip(a, b, strict=True))
    assert largest < 1e-6
    assert all(len(vector) == 384 for vector in there)


def test_p5_apart_a_child_that_dies_fails_its_batch_and_the_next_starts_another(
    apart: ApartEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    first = apart.embed(["a note"])
    dead = apart.child_pid
    assert dead is not None
    os.kill(dead, signal.SIGKILL)
    with pytest.raises(EmbeddingError, match="the embedding process ended") as failed:
        apart.embed(["another note"])
    assert "exit status -9" in str(failed.value)
    assert "embedding process ended" in caplog.text
    assert apart.embed(["a note"]) == first  # a new child, the same model
    assert apart.child_pid not in (None, dead)


def test_p5_apart_close_ends_the_child_and_a_later_batch_starts_one(
    apart: ApartEmbedder,
) -> None:
    apart.embed(["a note"])
    pid = apart.child_pid
    assert pid is not None
    apart.close()
    assert apart.child_pid is None
    assert not _running(pid)
    apart.close()  # twice: nothing to end
    assert len(apart.embed(["a note"])) == 1
    assert apart.child_pid not in (None, pid)


def test_p5_apart_the_child_ends_when_its_parent_is_killed() -> None:
    """kill -9 of the portal: the child's input ends and so does it."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import os, signal
                from webagents.portal.embeddings.apart import ApartEmbedder
                embedder = ApartEmbedder()
                embedder.embed(["a note"])
                print(embedder.child_pid, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = parent.communicate(timeout=120)
    assert parent.returncode == -signal.SIGKILL
    child = int(out.strip())
    # Orphaned, it is init's child now: it cannot be reaped here, only seen to end.
    assert until(lambda: not _running(child))


def _apart_children(pid: int) -> list[int]:
    """The processes whose parent is `pid` running embeddings/apart.py."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(_stat(int(entry))[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if parent == pid and b"webagents.portal.embeddings.apart" in command:
            found.append(int(entry))
    return found


@pytest.mark.e2e  # runs the installed webagents command
def test_p5_portal_serve_embeds_notes_in_a_child_process_it_ends_when_it_stops(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """`portal serve --embeddings local`, in-process jobs: a note put is found by meaning, its
    vector made by one child of the serve; the serve stopped, the child has ended."""
    served = Served(tmp_path, "--embeddings", "local", "--database", fresh_database_url)
    try:
        agent, agent_id = make_agent(tmp_path, served, fresh_database_url)
        with httpx.Client(base_url=served.url, headers=agent, params={"agentId": agent_id}) as http:
            note = {"namespace": "owner", "key": "pet", "content": "a puppy named rex"}
            assert http.put(URL, json=note).status_code == 200
            params = {"action": "search", "q": "my dog", "namespace": "owner"}

            def by_meaning() -> bool:
                found = http.get(URL, params=params).json()["entries"]
                return [e["key"] for e in found if "meaning" in e["matched"]] == ["pet"]

            assert until(by_meaning)
        children = _apart_children(served.popen.pid)
        assert len(children) == 1, children
    finally:
        served.stop()
    assert until(lambda: not _running(children[0]))
