"""memory_vectors.vector's format: a vector's float32 values as bytes, in the machine's byte
order (tables.MemoryVector). The one place that writes it and reads it back: the embedding
queue's store (memory/across_agents.py), the per-process cache (memory/vector_cache.py) and
pgvector's backfill of its `embedding` column (db/pgvector.py). numpy is imported with this
module: db/pgvector.py imports it only where it reads vectors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def encode(vector: Sequence[float] | npt.NDArray[np.float32]) -> bytes:
    """The stored form of a vector."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def decode(stored: bytes | memoryview) -> npt.NDArray[np.float32]:
    """The vector of its stored form (read-only: a view of the bytes)."""
    return np.frombuffer(bytes(stored), dtype=np.float32)
