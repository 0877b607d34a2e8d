"""The local model's batches in a process of their own: the embedding worker's of `portal
serve` (its in-process background jobs), so that the model and the requests do not share one
interpreter.

Measured (bench/README.md, "SQLite's burst of 100, taken apart"): in the serving process the
model ran three times slower while the process served a burst of puts, 16.6 ms a note against
5.2-5.5 alone. Its numpy work is many small operations, each letting go of the interpreter's
lock and waiting to take it back from the request threads; and the requests waited for it
meanwhile. In a child process (`python -m webagents.portal.embeddings.apart`) each has an
interpreter of its own. A search's query (one text, some 6 ms) is still embedded in the serving
process: it must not wait behind a batch of notes.

The child is started at the first batch (about a second: numpy and the model's load; some
170 MB), reads batches from its standard input and answers on its standard output (`_frame`:
a status byte and a length, then the vectors as float32 or the error's text), and ends when
its input does: when the portal stops or dies, whatever kills it. If the child dies, the
batch fails with EmbeddingError (its notes stay due: the worker tries them again) and the
next batch starts another.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO

from .errors import EmbeddingError
from .local import LocalEmbedder

log = logging.getLogger("webagents.portal")

_HEAD = struct.Struct(">BI")  # status (OK or FAILED), then the payload's length in bytes
OK, FAILED = 0, 1
STOP_SECONDS = 5.0  # how long `close` waits for the child to end before it kills it


class ApartEmbedder:
    """LocalEmbedder's vectors (the same model, name and dimensions), made in a child process.
    One batch at a time; safe to call from any thread."""

    name = LocalEmbedder.name
    dimensions = LocalEmbedder.dimensions

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        request = json.dumps(list(texts), ensure_ascii=True).encode()
        with self._lock:
            child = self._child or self._start()
            assert child.stdin is not None and child.stdout is not None
            try:
                child.stdin.write(_frame(OK, request))
                child.stdin.flush()
                status, payload = _read_frame(child.stdout)
            except (OSError, EOFError):
                self._child = None
                raise EmbeddingError(self._ended(child)) from None
        if status != OK:
            raise EmbeddingError(payload.decode("utf-8", "replace"))
        return _vectors(payload, len(texts), self.dimensions)

    @property
    def child_pid(self) -> int | None:
        """The child's process id while one runs (it is started at the first batch)."""
        child = self._child
        return child.pid if child is not None else None

    def close(self) -> None:
        """Ends the child (its input closed; killed if it has not ended in STOP_SECONDS)."""
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return
        assert child.stdin is not None
        try:
            child.stdin.close()
            child.wait(STOP_SECONDS)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait()
        finally:
            if child.stdout is not None:
                child.stdout.close()

    def _start(self) -> subprocess.Popen[bytes]:
        try:
            self._child = subprocess.Popen(  # this interpreter, this module
                [sys.executable, "-m", __name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as exc:
            raise EmbeddingError(f"cannot start the embedding process: {exc}") from exc
        return self._child

    @staticmethod
    def _ended(child: subprocess.Popen[bytes]) -> str:
        try:
            code = child.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # a pipe to a dead child
                    stream.close()
        reason = (
            f"the embedding process ended (exit status {code}); the notes stay due and the "
            "next batch starts it again"
        )
        log.warning("embedding notes: %s", reason)
        return reason


def _vectors(payload: bytes, count: int, dimensions: int) -> list[list[float]]:
    import numpy as np

    array = np.frombuffer(payload, dtype="<f4")
    if array.size != count * dimensions:
        raise EmbeddingError(
            f"the embedding process answered {array.size} floats for {count} texts of "
            f"{dimensions}: a bug; the notes stay due"
        )
    vectors: list[list[float]] = array.reshape(count, dimensions).tolist()
    return vectors


def _read_frame(stream: IO[bytes]) -> tuple[int, bytes]:
    head = stream.read(_HEAD.size)
    if len(head) < _HEAD.size:
        raise EOFError
    status, length = _HEAD.unpack(head)
    payload = stream.read(length)
    if len(payload) < length:
        raise EOFError
    return status, payload


def _frame(status: int, payload: bytes) -> bytes:
    return _HEAD.pack(status, len(payload)) + payload


def main() -> int:
    """The child: batches of texts in, their vectors out, until the input ends."""
    import numpy as np

    # Ctrl-C in the portal's terminal reaches its whole process group: the portal ends this
    # child by closing its input. Its standard output is the answers' alone: a library's
    # print goes to the standard error, where the portal's own log is.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    source, sink = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    embedder = LocalEmbedder()
    while True:
        try:
            _, request = _read_frame(source)
        except EOFError:
            return 0
        try:
            vectors = embedder.embed(json.loads(request))
            answer = _frame(OK, np.asarray(vectors, dtype="<f4").tobytes())
        except Exception as exc:  # told to the portal, which tries again
            answer = _frame(FAILED, f"{type(exc).__name__}: {exc}".encode())
        sink.write(answer)
        sink.flush()


if __name__ == "__main__":
    sys.exit(main())
