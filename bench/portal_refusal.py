"""What one refusal costs the portal: the CPU a real `webagents portal serve` spends answering
a request 503 (Retry-After) because its database gate is full, per 1000 such answers.

    .venv/bin/python bench/portal_refusal.py [--answers 4000] [--connections 8]

The portal runs on SQLite with `--max-db-requests 1 --max-db-waiting 0`; this process holds
SQLite's write lock (BEGIN IMMEDIATE) and sends one note put, which takes the gate's one slot
and waits for the lock inside it (up to SQLite's 30 s busy timeout). Meanwhile every other
API request is refused at once: `--connections` keep-alive connections send memory gets
(no body) and then memory puts (a small JSON body), one after another, and each answer must
be 503 with Retry-After. The portal's CPU time (user and system, from /proc) is read before
and after each kind: its CPU milliseconds per 1000 refusals, which a machine busy with other
work distorts much less than a rate (a process given less of a core takes longer, not more
CPU, for the same work). The client is plain asyncio streams, so that it takes little of the
machine from the portal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from portal_load import MEMORY, cpu_seconds, portal, set_up


def _request(method: str, host: str, target: str, key: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} {target} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {key}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _refused(host: str, port: int, request: bytes, count: int, *, fresh: bool) -> int:
    """Send `request` `count` times on one connection (`fresh`: each on a new one, as a
    client makes that waited out a Retry-After longer than its keep-alive); the answers that
    were 503 with Retry-After (anything else stops the run: the gate was not full)."""
    if fresh:
        return sum([await _refused(host, port, request, 1, fresh=False) for _ in range(count)])
    reader, writer = await asyncio.open_connection(host, port)
    refused = 0
    try:
        for _ in range(count):
            writer.write(request)
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            lines = head.lower().split("\r\n")
            length = next(int(line[15:]) for line in lines if line.startswith("content-length:"))
            body = await reader.readexactly(length)
            if not lines[0].startswith("http/1.1 503") or "retry-after:" not in head.lower():
                raise RuntimeError(f"not a refusal: {head}{body.decode()}")
            refused += 1
    finally:
        writer.close()
    return refused


async def _many(
    host: str, port: int, request: bytes, answers: int, connections: int, *, fresh: bool
) -> int:
    each = answers // connections
    done = await asyncio.gather(
        *(_refused(host, port, request, each, fresh=fresh) for _ in range(connections))
    )
    return sum(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=4000, help="refusals of each kind")
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{' '.join(f'{n:.2f}' for n in os.getloadavg())} at the start",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="wa-refusal-") as folder:
        work = Path(folder)
        home = work / "home"
        home.mkdir()
        path = work / "portal.db"
        database = f"sqlite:///{path}"
        gate = ["--max-db-requests", "1", "--max-db-waiting", "0"]
        with portal(database, home, gate) as (url, _log, pid):
            target = set_up(url, database, home)
            address = urlsplit(url)
            host, port = address.hostname or "127.0.0.1", address.port or 80
            held = sqlite3.connect(path, isolation_level=None)
            held.execute("BEGIN IMMEDIATE")
            put = json.dumps({"namespace": "shared", "key": "held", "content": "x"}).encode()
            holder = threading.Thread(
                target=lambda: httpx.put(
                    f"{url}{MEMORY}",
                    content=put,
                    headers={
                        "Authorization": f"Bearer {target.agent_key}",
                        "Content-Type": "application/json",
                    },
                    timeout=60,
                ),
                daemon=True,
            )
            holder.start()
            get = _request(
                "GET",
                f"{host}:{port}",
                f"{MEMORY}?action=get&namespace=shared&key=other",
                target.agent_key,
            )
            kinds = {
                "memory get (no body)": (get, False),
                "memory put (JSON body)": (
                    _request("PUT", f"{host}:{port}", MEMORY, target.agent_key, put),
                    False,
                ),
                "memory get, each on a new connection": (get, True),
            }
            try:
                _wait_until_full(host, port, get)
                print("\n| refused request | answers | portal CPU ms / 1000 refusals |")
                print("|---|---:|---:|")
                for kind, (request, fresh) in kinds.items():
                    used = cpu_seconds(pid)
                    count = asyncio.run(
                        _many(host, port, request, args.answers, args.connections, fresh=fresh)
                    )
                    used = cpu_seconds(pid) - used
                    print(f"| {kind} | {count} | {used * 1e6 / count:.0f} |", flush=True)
            finally:
                held.execute("ROLLBACK")
                held.close()
                holder.join(60)
    print(f"\nload average {' '.join(f'{n:.2f}' for n in os.getloadavg())} at the end")


def _wait_until_full(host: str, port: int, request: bytes) -> None:
    """Until the held put has the gate's one slot (a bounded poll): then a get is refused."""
    for _ in range(600):
        try:
            asyncio.run(_refused(host, port, request, 1, fresh=False))
            return
        except RuntimeError:
            time.sleep(0.05)
    sys.exit("the held put never took the gate's one slot")


if __name__ == "__main__":
    main()
