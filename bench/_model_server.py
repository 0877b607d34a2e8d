"""The scripted model server alone, as its own process: prints its URL, serves until killed."""

from __future__ import annotations

import signal
import sys
import threading

from webagents.testing import FunctionModel, Reply, ScriptedServer

REPLY = "A fixed reply of a realistic length for a short answer, about twenty words in all here."


def main() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with ScriptedServer(FunctionModel(lambda request: Reply(REPLY))) as server:
        print(f"model server at {server.base_url}", flush=True)
        stop.wait()
    sys.exit(0)


if __name__ == "__main__":
    main()
