"""The portal under many clients at once: 16, 64 and 256 concurrent clients of mixed memory
(put, get, search, sync) and chat (record, list, read) requests against a real `webagents
portal serve`, on SQLite and on PostgreSQL, measured in one run.

    .venv/bin/python bench/portal_load.py [--clients 16 64 256] [--seconds 20]
        [--databases sqlite postgresql] [-- PORTAL SERVE OPTIONS...]

Each client is one keep-alive connection (its own httpx client) sending one request after
another, with no pause: the load is as high as the portal can take. A client told 503 or 429
with Retry-After waits that long before its next request, as a well-behaved client does; one
without Retry-After, any other status, or a dropped connection is an error. The mix: memory
put 25%, get 20%, search 15%, sync 10% (by the agent's key, each client in its own caller
namespace and the shared one), chat record 10%, list 10%, read 10% (by the owner's API key).

Reported per database and client count: the successful (2xx) requests a second over the
level's whole time, p50 and p99 of every answered request's latency (2xx or not), the 2xx
of the client served least (whether a client told to wait is starved), the CPU seconds the
portal's process used in the level, per 1000 answered requests and per 1000 2xx (its cost,
which a machine shared with other work distorts much less than the rates), the share of the
level's time the portal's event loop waited, runnable, for a CPU (high: the machine, not the
portal, set the pace), every non-2xx status with whether it had Retry-After, and the
connections dropped; below each row, its 2xx by kind of request and its 503s that came after
a wait in the gate (the others were answered at once). Targets (issue 21): no error but
503/429 with Retry-After, p99 under 2 s, and throughput at 64 and 256 clients no lower than
at 16. A client count given more than once (`--clients 16 256 16 256`: levels alternated)
is judged on its levels together.

The clients run in this one process, beside the portal on the same machine: they take CPU the
portal could have used, and the run says how much. The PostgreSQL cluster is a throwaway one
(initdb, unix socket, fsync off, as the tests make it); SQLite runs as the portal runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import re
import resource
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' throwaway PostgreSQL cluster

from tests.portal.databases import PostgresServer, _Cluster  # noqa: E402

MEMORY = "/api/storage/memory-scoped"
SERVING = re.compile(r"webagents portal: serving at (http://\S+) ")
PASSWORD = "quiet-river-harbor-1234"  # not containing the username
WORDS = "apple river cloud stone lamp violin garden rocket maple harbor copper meadow".split()
MIX = [
    ("memory put", 25),
    ("memory get", 20),
    ("memory search", 15),
    ("memory sync", 10),
    ("chat record", 10),
    ("chat list", 10),
    ("chat read", 10),
]
KEYS_PER_CLIENT = 20


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    ok: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # one answer of each status
    served: list[int] = field(default_factory=list)  # each client's 2xx, once it is done
    kinds: Counter[str] = field(default_factory=Counter)  # the 2xx of each kind of request
    waited_out: int = 0  # 503s after waiting in the gate (the others came at once)


@dataclass(frozen=True)
class Portal:
    url: str
    agent_key: str
    agent_id: str
    user_key: str


def run(args: list[str], env: dict[str, str], stdin: str = "") -> str:
    done = subprocess.run(args, env=env, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


@contextlib.contextmanager
def portal(
    database: str, home: Path, extra: list[str], cpus: set[int] | None = None
) -> Iterator[tuple[str, list[str], int]]:
    """A running `webagents portal serve` on `database`: its address, its log so far, and
    its process id; `cpus`: the CPUs it may run on (its threads, started later, too)."""
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    webagents = str(Path(sys.executable).parent / "webagents")
    serve = [webagents, "portal", "serve", "--port", "0", "--embeddings", "none"]
    child = subprocess.Popen(
        [*serve, "--database", database, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if cpus is not None:
        os.sched_setaffinity(child.pid, cpus)
    lines: list[str] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line)
            found = SERVING.search(line)
            if found:
                break
        else:
            raise RuntimeError("webagents portal serve did not start:\n" + "".join(lines))
        out = child.stdout
        # Read on to the end, or the pipe fills and the portal stops answering.
        threading.Thread(target=lambda: lines.extend(out), daemon=True).start()
        yield found.group(1), lines, child.pid
    finally:
        child.terminate()
        child.wait(30)


def set_up(url: str, database: str, home: Path) -> Portal:
    """A user, their API key, and a published agent with its key, through the CLI and API."""
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    webagents = str(Path(sys.executable).parent / "webagents")
    run([webagents, "portal", "adduser", "bench", "--database", database], env, PASSWORD)
    made = run([webagents, "portal", "apikey", "bench", "--database", database], env)
    user_key = made.strip().splitlines()[-1]
    answer = httpx.post(
        f"{url}/api/agents",
        json={"name": "loadbench", "description": "load"},
        headers={"Authorization": f"Bearer {user_key}"},
        timeout=30,
    )
    answer.raise_for_status()
    body = answer.json()
    return Portal(url, body["rawApiKey"], body["agent"]["id"], user_key)


class Client:
    """One client: one connection, requests one after another from the mix."""

    def __init__(
        self, number: int, target: Portal, tally: Tally, rng: random.Random, tls: ssl.SSLContext
    ) -> None:
        self.number = number
        self.target = target
        self.tally = tally
        self.rng = rng
        self.namespace = f"caller:client{number}"
        self.sent = 0
        self.ok = 0
        self.chats: list[str] = []
        self.http = httpx.AsyncClient(
            base_url=target.url,
            timeout=60,
            verify=tls,  # made once: making one per client takes longer than a level
            # A connection idle for a second (a client waiting out a Retry-After) is not
            # reused: the portal ends idle ones after 5 s by its own clock, and on this
            # loaded machine a client's wait and its answer's delivery may add up to that,
            # so that the client sends as the server closes (a client's race, not a drop).
            limits=httpx.Limits(
                max_connections=1, max_keepalive_connections=1, keepalive_expiry=1.0
            ),
        )

    def request(self, kind: str) -> tuple[str, str, dict[str, object]]:
        """Method, path and httpx options of one request of `kind`."""
        agent = {"Authorization": f"Bearer {self.target.agent_key}"}
        user = {"Authorization": f"Bearer {self.target.user_key}"}
        key = f"note-{self.rng.randrange(KEYS_PER_CLIENT)}"
        word = self.rng.choice(WORDS)
        chats = f"/api/agents/{self.target.agent_id}/conversations"
        if kind == "memory put":
            body = {
                "namespace": self.namespace,
                "key": key,
                "content": f"{word} {self.sent} " + " ".join(self.rng.sample(WORDS, 6)),
                "description": word,
                "source": "bench",
                "at": None,
            }
            return "PUT", MEMORY, {"json": body, "headers": agent}
        if kind == "memory get":
            params = {"action": "get", "namespace": self.namespace, "key": key}
            return "GET", MEMORY, {"params": params, "headers": agent}
        if kind == "memory search":
            params = [
                ("action", "search"),
                ("q", word),
                ("namespace", self.namespace),
                ("namespace", "shared"),
                ("limit", "10"),
            ]
            return "GET", MEMORY, {"params": params, "headers": agent}
        if kind == "memory sync":
            params = {"action": "sync", "namespace": self.namespace}  # from the start
            return "GET", MEMORY, {"params": params, "headers": agent}
        if kind == "chat record" or not self.chats:
            body = {
                # A new chat every 10 turns, so that a chat read stays the size of a chat.
                "sessionId": f"client{self.number}-{self.sent // 10}",
                "messages": [
                    {"role": "user", "content": f"tell me about {word}"},
                    {"role": "assistant", "content": f"{word} is a word ({self.sent})"},
                ],
            }
            return "POST", chats, {"json": body, "headers": user}
        if kind == "chat list":
            return "GET", chats, {"params": {"limit": "20"}, "headers": user}
        return "GET", f"{chats}/{self.rng.choice(self.chats)}", {"headers": user}

    async def run(self, until: float) -> None:
        kinds = [kind for kind, _ in MIX]
        weights = [weight for _, weight in MIX]
        try:
            while time.monotonic() < until:
                kind = self.rng.choices(kinds, weights)[0]
                method, path, options = self.request(kind)
                self.sent += 1
                began = time.monotonic()
                try:
                    answer = await self.http.request(method, path, **options)  # type: ignore[arg-type]
                except httpx.TransportError as exc:
                    self.tally.dropped[type(exc).__name__] += 1
                    continue
                self.tally.latencies.append(time.monotonic() - began)
                if answer.is_success:
                    self.tally.ok += 1
                    self.tally.kinds[kind] += 1
                    self.ok += 1
                    if method == "POST":
                        self.chats.append(answer.json()["chatId"])
                    continue
                retry = answer.headers.get("retry-after")
                shown = f"{answer.status_code}" + (
                    " (Retry-After)" if retry else " (no Retry-After)"
                )
                self.tally.statuses[shown] += 1
                self.tally.examples.setdefault(shown, f"{kind}: {answer.text[:300]}")
                self.tally.waited_out += "no request finished" in answer.text
                if retry and answer.status_code in (429, 503):
                    await asyncio.sleep(min(float(retry), until - time.monotonic(), 30))
        finally:
            self.tally.served.append(self.ok)
            await self.http.aclose()


async def level(target: Portal, clients: int, seconds: float) -> tuple[Tally, float]:
    tally = Tally()
    tls = ssl.create_default_context()
    group = [Client(n, target, tally, random.Random(n), tls) for n in range(clients)]
    began = time.monotonic()
    until = began + seconds
    await asyncio.gather(*(client.run(until) for client in group))
    return tally, time.monotonic() - began


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) the process and its children have used so far: the
    portal's cost, which a loaded machine distorts far less than its rates and latencies (a
    process given less of a core takes longer, not more CPU, for the same work)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # After the command's closing parenthesis: state, ppid, ..., utime (14), stime (15).
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def loop_waited(pid: int) -> float:
    """Seconds the portal's main thread (its event loop) has so far waited, runnable, for a
    CPU (the kernel's run-queue wait, /proc/PID/schedstat's second field): on a machine
    busy with other work, the time the loop could have worked and was not let to."""
    try:
        return int((Path("/proc") / str(pid) / "schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")  # no schedstat (a kernel without it): the column says nan


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclass(frozen=True)
class Level:
    """One level's outcome, as the targets judge it."""

    clients: int
    ok: int
    took: float
    p99: float
    errors: int


def report(kind: str, clients: int, tally: Tally, took: float, cpu: float, waited: float) -> Level:
    rate = tally.ok / took
    p50 = statistics.median(tally.latencies) if tally.latencies else float("nan")
    p99 = percentile(tally.latencies, 0.99)
    allowed = {f"{status} (Retry-After)" for status in (429, 503)}
    errors = sum(n for shown, n in tally.statuses.items() if shown not in allowed)
    errors += sum(tally.dropped.values())
    others = ", ".join(f"{n} x {shown}" for shown, n in sorted(tally.statuses.items())) or "none"
    dropped = ", ".join(f"{n} x {name}" for name, n in sorted(tally.dropped.items())) or "none"
    answered = len(tally.latencies)
    per_thousand = f"{cpu * 1000 / answered:.2f}" if answered else "none answered"
    per_thousand_ok = f"{cpu * 1000 / tally.ok:.2f}" if tally.ok else "none served"
    fewest = min(tally.served, default=0)
    print(
        f"| {kind} | {clients} | {tally.ok} | {rate:.0f} | {p50 * 1000:.0f} | {p99 * 1000:.0f} "
        f"| {fewest} | {cpu:.1f} | {per_thousand} | {per_thousand_ok} "
        f"| {waited * 100 / took:.0f}% | {others} | {dropped} |",
        flush=True,
    )
    for shown, example in sorted(tally.examples.items()):
        print(f"  e.g. {shown}, {example}", file=sys.stderr, flush=True)
    kinds = ", ".join(f"{tally.kinds[name]} {name}" for name, _ in MIX)
    print(f"  2xx: {kinds}; 503 after waiting: {tally.waited_out}", file=sys.stderr, flush=True)
    return Level(clients, tally.ok, took, p99, errors)


def shortfalls(kind: str, levels: list[Level]) -> list[str]:
    """The targets `levels` miss: errors, p99, and throughput below the fewest clients'.
    A client count run more than once (`--clients 16 256 16 256`, alternated) is judged on
    its levels together (their 2xx over their time): consecutive levels of the same count
    differ by 10% and more on a 2-core machine, so one level against another says little."""
    missed = []
    for level in levels:
        if level.errors:
            missed.append(f"{kind} at {level.clients}: {level.errors} errors")
        if level.p99 >= 2.0:
            missed.append(f"{kind} at {level.clients}: p99 {level.p99:.2f} s")
    rates = {
        clients: sum(level.ok for level in levels if level.clients == clients)
        / sum(level.took for level in levels if level.clients == clients)
        for clients in sorted({level.clients for level in levels})
    }
    base = rates[min(rates)]
    missed += [
        f"{kind} at {clients}: {rate:.0f}/s below {base:.0f}/s"
        for clients, rate in rates.items()
        if rate < base
    ]
    return missed


def measure(kind: str, database: str, work: Path, args: argparse.Namespace) -> list[str]:
    home = work / f"home-{kind}"
    home.mkdir()
    with portal(database, home, args.portal_args, args.portal_cpus) as (url, log, pid):
        target = set_up(url, database, home)
        asyncio.run(level(target, 4, 2.0))  # warm: the first chats and notes exist
        levels = []
        for clients in args.clients:
            used, waited = cpu_seconds(pid), loop_waited(pid)
            tally, took = asyncio.run(level(target, clients, args.seconds))
            used, waited = cpu_seconds(pid) - used, loop_waited(pid) - waited
            levels.append(report(kind, clients, tally, took, used, waited))
        noted = [line for line in log if " 500 " in line or "Traceback" in line]
        if noted:
            print(f"  the portal's log has {len(noted)} lines of 500s or tracebacks", flush=True)
    return shortfalls(kind, levels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument(
        "--portal-cpus",
        type=lambda text: {int(n) for n in text.split(",")},
        default=None,
        help="CPUs (0,1,...) for the portal process; the clients get the others (sqlite only: "
        "a PostgreSQL cluster would share the clients')",
    )
    parser.add_argument("portal_args", nargs="*", help="more `portal serve` options, after --")
    args = parser.parse_args()
    if args.portal_cpus is not None:
        others = set(range(os.cpu_count() or 1)) - args.portal_cpus
        if not others or args.databases != ["sqlite"]:
            parser.error("--portal-cpus: leave a CPU for the clients, and --databases sqlite")
        os.sched_setaffinity(0, others)
        print(f"the portal on CPUs {sorted(args.portal_cpus)}, the clients on {sorted(others)}")
    # Stopped by a signal, it still stops its portal and its PostgreSQL cluster (finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if files < max(args.clients) + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(args.clients) + 256,) * 2)
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{' '.join(f'{n:.2f}' for n in os.getloadavg())} at the start",
        flush=True,
    )
    print(f"{args.seconds:g} s a level; portal serve {' '.join(args.portal_args) or '(defaults)'}")
    print(
        "\n| database | clients | 2xx | 2xx/s | p50 ms | p99 ms | fewest 2xx of a client "
        "| portal CPU s | portal CPU s / 1000 answers | portal CPU s / 1000 2xx "
        "| loop waiting for a CPU | non-2xx | dropped |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    cpu_before = time.process_time()
    missed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="wa-load-") as folder:
        work = Path(folder)
        for kind in args.databases:
            if kind == "sqlite":
                missed += measure(kind, f"sqlite:///{work / 'portal.db'}", work, args)
                continue
            cluster = _Cluster()
            try:
                database = PostgresServer(cluster.start()).new_database()
                missed += measure(kind, database, work, args)
            finally:
                cluster.stop()
    print(
        f"\nthe clients' own CPU time: {time.process_time() - cpu_before:.0f} s; load average "
        f"{' '.join(f'{n:.2f}' for n in os.getloadavg())} at the end",
    )
    print("targets met" if not missed else "targets missed: " + "; ".join(missed), flush=True)


if __name__ == "__main__":
    main()
