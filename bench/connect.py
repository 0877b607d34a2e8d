"""Requests per second and latency of a published agent reached through the portal and Portal
Connect, beside the same agent served directly, measured in the same run.

    .venv/bin/python bench/connect.py [--requests 600] [--concurrency 1 16]

Real processes: the scripted model server, `webagents portal serve` (SQLite), and
`webagents serve` of the agent after `webagents login --token` and `webagents publish`. The
direct row calls the agent's own HTTP endpoint (anonymously: the agent has no access: block);
the portal row calls `POST <portal>/agents/bench/chat/completions` with the owner's API key,
which the portal relays over the agent's WebSocket. The difference between the rows is what
the portal and Connect add: the portal's verification of the key, the assertion it signs and
the agent verifies, and the relay's frames both ways. The same pair is measured for the
Responses API (`/v1/responses` served directly, `POST <portal>/agents/bench/responses`
relayed), in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from serve import BODY, RESPONSES_BODY, load, start

ROOT = Path(__file__).resolve().parents[1]
CONNECTED = "connected to the portal"


def run(args: list[str], env: dict[str, str], stdin: str = "") -> str:
    done = subprocess.run(args, env=env, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def wait_for(log: Path, text: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"never said {text!r}:\n{log.read_text(errors='replace')[-3000:]}")


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    """Stop the servers a benchmark started, the last started first."""
    for process in reversed(processes):
        process.terminate()
        process.wait(timeout=15)


def heading(script: str) -> str:
    """The first line of a benchmark's table: the script, the date and the machine."""
    return (
        f"# bench/{script}, {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    options = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WEBAGENTS_"))}
    env.pop("ROBUTLER_API_URL", None)
    webagents = str(Path(sys.executable).parent / "webagents")
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        env["WEBAGENTS_HOME"] = str(logs / "home")
        try:
            model, model_url = start(
                [sys.executable, str(ROOT / "bench" / "_model_server.py")],
                env,
                "model server at ",
                logs / "model.log",
            )
            processes.append(model)
            portal, portal_url = start(
                [
                    webagents,
                    "portal",
                    "serve",
                    "--port",
                    "0",
                    "--embeddings",
                    "none",
                    "--access-log",
                ],
                env,
                "webagents portal: serving at ",
                logs / "portal.log",
            )
            processes.append(portal)
            run([webagents, "portal", "adduser", "bench"], env, stdin="quiet-harbor-731\n")
            key = run([webagents, "portal", "apikey", "bench"], env).strip().splitlines()[-1]
            run([webagents, "login", "--portal", portal_url, "--token", key], env)
            agent = logs / "bench"
            agent.mkdir()
            (agent / "AGENT.md").write_text(
                "---\nname: bench\nmodel: openai/scripted\n---\nAnswer briefly.\n",
                encoding="utf-8",
            )
            run([webagents, "publish", str(agent)], env)
            served, served_url = start(
                [webagents, "serve", str(agent), "--port", "0"],
                {**env, "OPENAI_BASE_URL": f"{model_url}/v1"},
                "webagents: serving at ",
                logs / "serve.log",
            )
            processes.append(served)
            wait_for(logs / "serve.log", CONNECTED)
            wait_for(logs / "portal.log", "GET /.well-known/jwks.json")  # the agent has the keys
            rows = []
            owner = {"Authorization": f"Bearer {key}"}
            for concurrency in options.concurrency:
                for api, shape in (("chat/completions", BODY), ("responses", RESPONSES_BODY)):
                    # The same API, served directly, then relayed: /v1/<api> beside the portal's
                    # /agents/bench/<api>.
                    direct, relayed = (
                        asyncio.run(
                            load(
                                url,
                                "bench",
                                options.requests,
                                concurrency,
                                path=path,
                                headers=headers,
                                shape=shape,
                            )
                        )
                        for url, path, headers in (
                            (served_url, f"/v1/{api}", None),
                            (portal_url, f"/agents/bench/{api}", owner),
                        )
                    )
                    rows.append((api, concurrency, direct, relayed))
        except Exception:
            for name in ("portal.log", "serve.log"):
                if (logs / name).exists():
                    said = (logs / name).read_text(errors="replace")[-3000:]
                    print(f"--- {name}\n{said}", file=sys.stderr)
            raise
        finally:
            stop_all(processes)

    print(f"{heading('connect.py')}, {options.requests} requests per row\n")
    print(
        "| API | clients | agent served directly: req/s | p50 ms | p95 ms "
        "| through the portal and Connect: req/s | p50 ms | p95 ms | added p50 ms "
        "| throughput kept |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for api, concurrency, direct, relayed in rows:
        print(
            f"| {api} | {concurrency} "
            f"| {direct['rps']:.0f} | {direct['p50']:.2f} | {direct['p95']:.2f} "
            f"| {relayed['rps']:.0f} | {relayed['p50']:.2f} | {relayed['p95']:.2f} "
            f"| {relayed['p50'] - direct['p50']:.2f} | {relayed['rps'] / direct['rps']:.0%} |"
        )


if __name__ == "__main__":
    main()
