"""Embedding throughput of `portal serve --embeddings CHOICE`, at the store's batch of 32.

    .venv/bin/python bench/embeddings.py [--choice local] [--texts 256] [--repeat 20]

Three figures: the first call (the local model's load included), texts a second for short
notes (the semantic test set's, about 15 word pieces) and for texts cut at 256 word pieces
(the longest the local model reads), and the median time to embed one search query, which a
semantic search waits on. The local model runs numpy's BLAS on one thread unless
OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) says otherwise; the figures are the machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from _timing import median_ms
from threadpoolctl import threadpool_info

from webagents.portal.embeddings import make_embedder

PAIRS = json.loads(
    (Path(__file__).parent.parent / "tests/portal/data/semantic_pairs.json").read_text("utf-8")
)["pairs"]
BATCH = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--choice", default="local", help="as --embeddings: local, openai:MODEL")
    parser.add_argument("--texts", type=int, default=256, help="texts per throughput figure")
    parser.add_argument("--repeat", type=int, default=20, help="calls for the query's median")
    args = parser.parse_args()
    embedder = make_embedder(args.choice)
    if embedder is None:
        raise SystemExit("--choice none embeds nothing")
    notes = [PAIRS[i % len(PAIRS)]["note"] for i in range(args.texts)]
    long = [" ".join([note] * 40) for note in notes]  # every one past 256 word pieces

    began = time.perf_counter()
    embedder.embed(["the first call"])
    first = time.perf_counter() - began

    def throughput(texts: list[str]) -> float:
        began = time.perf_counter()
        for start in range(0, len(texts), BATCH):
            embedder.embed(texts[start : start + BATCH])
        return len(texts) / (time.perf_counter() - began)

    short_rate = throughput(notes)
    long_rate = throughput(long)
    query = median_ms(lambda: embedder.embed([PAIRS[0]["query"]]), args.repeat)
    blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    print(
        f"{embedder.name} ({embedder.dimensions} dimensions), {platform.machine()}, "
        f"{os.cpu_count()} cores, BLAS threads {blas}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"first call (load included): {first * 1000:.0f} ms")
    print(f"short notes, batch {BATCH}: {short_rate:.0f} texts/s")
    print(f"256-piece texts, batch {BATCH}: {long_rate:.1f} texts/s")
    print(f"one query: {query:.1f} ms (median of {args.repeat})")


if __name__ == "__main__":
    main()
