"""Requests per second and latency of `webagents serve` in front of the scripted model server,
beside the scripted model server alone, measured in the same run.

    .venv/bin/python bench/serve.py [--requests 600] [--concurrency 1 16 64]

The difference between the two rows at each concurrency is webagents' overhead: verifying the
caller, the agent's conversation and prompt, the loop, and a second HTTP hop. The same turn
through the Responses API (`/v1/responses`) is measured in the same run, beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BODY = {"model": "", "messages": [{"role": "user", "content": "Say something short."}]}
RESPONSES_BODY = {"model": "", "input": "Say something short."}


def start(
    args: list[str], env: dict[str, str], marker: str, log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server whose output goes to `log`; its URL, read from the line with `marker`."""
    with log.open("wb") as out:
        process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        for line in log.read_text(errors="replace").splitlines():
            if marker in line:
                return process, line.split(marker, 1)[1].split()[0].removesuffix("/v1")
        time.sleep(0.05)
    raise RuntimeError(f"{args[0]} did not start:\n{log.read_text(errors='replace')}")


async def load(
    url: str,
    model: str,
    requests: int,
    concurrency: int,
    *,
    path: str = "/v1/chat/completions",
    headers: dict[str, str] | None = None,
    shape: dict[str, object] = BODY,
) -> dict[str, float]:
    latencies: list[float] = []
    body = {**shape, "model": model}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    # TCP_NODELAY: without it every request waits on a delayed ACK (httpx writes headers and
    # body separately), which would measure the kernel's 40 ms rather than the servers.
    transport = httpx.AsyncHTTPTransport(
        limits=limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    )
    async with httpx.AsyncClient(
        base_url=url, transport=transport, timeout=60, headers=headers
    ) as client:
        for _ in range(min(20, requests)):  # warm up connections and caches
            (await client.post(path, json=body)).raise_for_status()
        remaining = requests

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                began = time.perf_counter()
                response = await client.post(path, json=body)
                latencies.append(time.perf_counter() - began)
                response.raise_for_status()

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50": statistics.median(latencies) * 1000,
        "p95": latencies[int(len(latencies) * 0.95) - 1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    options = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WEBAGENTS_"))}
    with tempfile.TemporaryDirectory() as tmp:
        env["WEBAGENTS_HOME"] = str(Path(tmp) / "home")
        logs = Path(tmp)
        model, model_url = start(
            [sys.executable, str(ROOT / "bench" / "_model_server.py")],
            env,
            "model server at ",
            logs / "model.log",
        )
        agent = Path(tmp) / "bench"
        agent.mkdir()
        (agent / "AGENT.md").write_text(
            "---\nname: bench\nmodel: openai/scripted\n---\nAnswer briefly.\n", encoding="utf-8"
        )
        webagents = str(Path(sys.executable).parent / "webagents")
        served, served_url = start(
            [webagents, "serve", str(agent), "--port", "0"],
            {**env, "OPENAI_BASE_URL": f"{model_url}/v1"},
            "webagents: serving at ",
            logs / "serve.log",
        )
        try:
            rows = []
            for concurrency in options.concurrency:
                bare = asyncio.run(load(model_url, "scripted", options.requests, concurrency))
                through = asyncio.run(load(served_url, "bench", options.requests, concurrency))
                responses = asyncio.run(
                    load(
                        served_url,
                        "bench",
                        options.requests,
                        concurrency,
                        path="/v1/responses",
                        shape=RESPONSES_BODY,
                    )
                )
                rows.append((concurrency, bare, through, responses))
        except Exception:
            print((logs / "serve.log").read_text(errors="replace")[-3000:], file=sys.stderr)
            raise
        finally:
            for process in (served, model):
                process.terminate()
                process.wait(timeout=15)

    print(
        f"# bench/serve.py, {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{options.requests} requests per row\n"
    )
    print(
        "| clients | scripted model alone: req/s | p50 ms | p95 ms "
        "| through webagents serve: req/s | p50 ms | p95 ms | added p50 ms | throughput kept "
        "| /v1/responses: req/s | p50 ms | added p50 ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for concurrency, bare, through, responses in rows:
        print(
            f"| {concurrency} | {bare['rps']:.0f} | {bare['p50']:.2f} | {bare['p95']:.2f} "
            f"| {through['rps']:.0f} | {through['p50']:.2f} | {through['p95']:.2f} "
            f"| {through['p50'] - bare['p50']:.2f} | {through['rps'] / bare['rps']:.0%} "
            f"| {responses['rps']:.0f} | {responses['p50']:.2f} "
            f"| {responses['p50'] - bare['p50']:.2f} |"
        )


if __name__ == "__main__":
    main()
