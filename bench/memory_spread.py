"""Read-after-write across the processes of one agent (issue 23, SPEC P12): how long after a
note is written through one `webagents serve` another process of the same agent reads it.

    .venv/bin/python bench/memory_spread.py [--writes 200] [--baseline 4]

Real processes on one machine: `webagents portal serve` (SQLite, no embeddings), and two
`webagents serve` of one published agent with `memory: {local: false, portal: true}`, each
with its own home and folder (two machines), called directly at their own ports with the
owner's key; the model is a scripted one in this process (`webagents.testing.ScriptedServer`:
"write K C" calls memory_write, "read K" memory_read, "list" memory_list, and the reply is
the tool's answer). Each write is a request to A; then requests to B, one after another,
until B's reply shows the note: the figure is the time from A's reply to that reply of B's.

- read by key: `memory_read` through B, which answers from its cache, else asks the portal
  for that one entry before saying there is no such note (read-through).
- listed: `memory_list` through B, which lists its cache only: the note is there once B
  pulled, which the portal's `memory_changed` notice over Portal Connect starts.
- listed, without Portal Connect (`serve --no-connect`, `sync_seconds` 30, the default):
  the pull on the timer alone, the floor before notices; fewer writes (each waits for it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from connect import CONNECTED, heading, run, stop_all, wait_for
from serve import start

from webagents.model import ModelRequest
from webagents.testing import FunctionModel, ScriptedServer, call

OWNER_KEY = "bench-owner-key-0123456789"
AGENT = """---
name: spread
model: openai/scripted
access:
  owner: env:SPREAD_OWNER_KEY
skills:
  - memory:
      local: false
      portal: true
---
Keep notes.
"""
GUARD = 120.0
"""A write not read within this is reported as lost (never seen: a failure, not a figure)."""


def think(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if last.get("role") == "tool":
        return str(last.get("content"))
    verb, _, rest = str(last.get("content")).partition(" ")
    if verb == "write":
        key, _, content = rest.partition(" ")
        return call("memory_write", key=key, content=content)
    if verb == "read":
        return call("memory_read", key=rest)
    return call("memory_list")


def ask(client: httpx.Client, url: str, text: str) -> str:
    answer = client.post(
        f"{url}/v1/chat/completions",
        json={"model": "spread", "messages": [{"role": "user", "content": text}]},
        headers={"Authorization": f"Bearer {OWNER_KEY}"},
    )
    answer.raise_for_status()
    return str(answer.json()["choices"][0]["message"]["content"])


def in_portal(client: httpx.Client, portal: str, agent_key: str, key: str) -> str:
    """The note as the portal's memory store has it (A's push), for the "portal" row."""
    answer = client.get(
        f"{portal}/api/storage/memory-scoped",
        params={"action": "get", "namespace": "owner", "key": key},
        headers={"Authorization": f"Bearer {agent_key}"},
    )
    answer.raise_for_status()
    return answer.text


def look(client: httpx.Client, b: str | tuple[str, str], how: str, key: str) -> str:
    """B's answer (the note, its list, or no such note), or the portal's for a tuple b."""
    if isinstance(b, tuple):
        return in_portal(client, *b, key)
    return ask(client, b, f"read {key}" if how == "read" else "list")


def measure(
    client: httpx.Client, a: str, b: str | tuple[str, str], writes: int, how: str
) -> list[float]:
    """Seconds from each write's reply through A to B's first reply that shows it (or, for
    `how` "portal", b being the portal and A's key: the portal's)."""
    run_id = uuid.uuid4().hex[:8]
    seen = []
    for n in range(writes):
        key = f"{how}-{run_id}-{n}"
        token = f"token-{uuid.uuid4().hex}"
        ask(client, a, f"write {key} {token}")
        written = time.perf_counter()

        while token not in look(client, b, how, key):
            if time.perf_counter() - written > GUARD:
                raise RuntimeError(f"{key} was not read through B within {GUARD:g} s")
        seen.append(time.perf_counter() - written)
    return seen


def served(env: dict[str, str], webagents: str, home: Path, folder: Path, *extra: str) -> Any:
    return start(
        [webagents, "serve", str(folder), "--port", "0", *extra],
        {**env, "WEBAGENTS_HOME": str(home)},
        "webagents: serving at ",
        home.parent / f"serve-{folder.parent.name}.log",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--baseline", type=int, default=4)
    options = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WEBAGENTS_"))}
    env.pop("ROBUTLER_API_URL", None)
    webagents = str(Path(sys.executable).parent / "webagents")
    processes: list[subprocess.Popen[bytes]] = []
    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(FunctionModel(think)) as model:
        logs = Path(tmp)
        env.update(SPREAD_OWNER_KEY=OWNER_KEY, OPENAI_BASE_URL=model.base_url)
        homes = [logs / "a" / "home", logs / "b" / "home"]
        folders = [logs / "a" / "spread", logs / "b" / "spread"]
        try:
            portal, portal_url = start(
                [webagents, "portal", "serve", "--port", "0", "--embeddings", "none"],
                {**env, "WEBAGENTS_HOME": str(logs / "portal-home")},
                "webagents portal: serving at ",
                logs / "portal.log",
            )
            processes.append(portal)
            portal_env = {**env, "WEBAGENTS_HOME": str(logs / "portal-home")}
            run([webagents, "portal", "adduser", "bench"], portal_env, "spread-portal-pass-987\n")
            key = run([webagents, "portal", "apikey", "bench"], portal_env).splitlines()[-1]
            for home, folder in zip(homes, folders, strict=True):
                folder.mkdir(parents=True)
                (folder / "AGENT.md").write_text(AGENT, encoding="utf-8")
                machine = {**env, "WEBAGENTS_HOME": str(home)}
                run([webagents, "login", "--portal", portal_url, "--token", key], machine)
                run([webagents, "publish", str(folder)], machine)
            with httpx.Client(timeout=60) as client:
                urls = []
                for home, folder in zip(homes, folders, strict=True):
                    process, url = served(env, webagents, home, folder)
                    processes.append(process)
                    urls.append(url)
                    wait_for(home.parent / f"serve-{folder.parent.name}.log", CONNECTED)
                config = json.loads((folders[0] / ".webagents" / "config.json").read_text())
                agent_key = (homes[0] / "agents" / f"{config['link']['agentId']}.key").read_text()
                portal_row = measure(
                    client, urls[0], (portal_url, agent_key.strip()), options.writes, "portal"
                )
                rows.append(("in the portal (A's push alone)", portal_row))
                for how in ("read", "list"):
                    ask(client, urls[0], "list")  # each process's first block: pulled
                    ask(client, urls[1], "list")
                    rows.append((how, measure(client, urls[0], urls[1], options.writes, how)))
                if options.baseline:
                    for process in processes[1:]:
                        process.terminate()
                        process.wait(timeout=15)
                    del processes[1:]
                    urls = []
                    for home, folder in zip(homes, folders, strict=True):
                        process, url = served(env, webagents, home, folder, "--no-connect")
                        processes.append(process)
                        urls.append(url)
                    ask(client, urls[0], "list")
                    ask(client, urls[1], "list")
                    floor = measure(client, urls[0], urls[1], options.baseline, "list")
                    rows.append(("list, no Connect", floor))
        except Exception:
            for log in sorted(logs.rglob("*.log")):
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
            raise
        finally:
            stop_all(processes)

    print(f"{heading('memory_spread.py')}\n")
    print("| read through B | writes | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    for how, seconds in rows:
        ms = sorted(s * 1000 for s in seconds)
        p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
        print(f"| {how} | {len(ms)} | {statistics.median(ms):.1f} | {p99:.1f} | {ms[-1]:.1f} |")


if __name__ == "__main__":
    main()
