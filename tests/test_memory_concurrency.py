"""M7, M9: two processes of 20 tasks each, writing and forgetting the same and other keys."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from webagents.notes.note_file import parse_note
from webagents.rights import rights_of

from .conftest import REPO_ROOT
from .memory_helpers import ALICE, memory_agent
from .memory_worker import content


def test_m7_no_lost_update_no_torn_file_and_the_index_agrees(tmp_path: Path) -> None:
    folder = tmp_path / "keeper"
    _, watcher = memory_agent(folder)  # a third view, started before the writers
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.memory_worker", str(folder), name],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    finals: dict[str, str] = {}
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
        finals.update(json.loads(out))

    alice = watcher.store.folder("caller:alice@example.com")
    files = {path.stem: path for path in alice.glob("*.md")}
    # Every task's own note holds exactly what it wrote last: no update was lost.
    assert {key: files[key].read_text().split("---\n", 2)[2] for key in finals} == finals
    # Every file is one whole write, never pieces of two.
    for key, path in files.items():
        note = parse_note(path.read_bytes(), namespace="x", key=key, mtime=0)
        process, task, round_ = re.match(r"\[([ab])-(\d+)-(\d+)\]", note.content).groups()  # type: ignore[union-attr]
        assert note.content == content(process, int(task), int(round_)), key
    assert not list(alice.glob(".*.tmp"))  # no temporary file left behind

    # The index agrees with the files: a fresh one, and the one that watched from the start.
    _, fresh = memory_agent(folder)
    expected = sorted(files)
    for skill in (fresh, watcher):
        skill.index.refresh(["caller:alice@example.com"])
        indexed = sorted(e.key for e in skill.index.entries("caller:alice@example.com"))
        assert indexed == expected
    assert watcher.block(rights_of(ALICE)) == fresh.block(rights_of(ALICE))
