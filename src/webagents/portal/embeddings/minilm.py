"""all-MiniLM-L6-v2's forward in numpy: the model as sentence-transformers runs it, no torch.

BERT (word + position + type embeddings and LayerNorm, then 6 layers of 12-head
self-attention that never looks at padding, each with a GELU feed-forward and LayerNorms
after the residuals), then the mean of the real pieces' vectors, L2-normalised.
tests/portal/test_embeddings_local.py checks it against the model's own vectors.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from importlib.resources.abc import Traversable

import numpy as np
import safetensors.numpy
import tokenizers
from numpy.typing import NDArray

from ...errors import ConfigError

Array = NDArray[np.float32]

MAX_PIECES = 256
"""sentence_bert_config.json's max_seq_length: longer texts are cut there, as in training
([CLS], 254 pieces, [SEP]). tokenizer.json's own truncation (128) is not the one used."""


@dataclass(frozen=True)
class _Layer:
    qkv: Array  # (hidden, 3 * hidden): query, key and value side by side, one product
    qkv_bias: Array
    out: Array
    out_bias: Array
    norm1: tuple[Array, Array]
    up: Array
    up_bias: Array
    down: Array
    down_bias: Array
    norm2: tuple[Array, Array]


class MiniLM:
    """The tokenizer and the weights (transposed once, to multiply from the right)."""

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        config: dict[str, object],
        tensors: dict[str, NDArray[np.generic]],
    ) -> None:
        if config.get("hidden_act") != "gelu" or config.get("model_type") != "bert":
            raise ConfigError("the model's config.json is not a BERT with GELU: reinstall it")
        self.tokenizer = tokenizer
        # Encoding from several threads at once is not promised to be safe; it is quick.
        self._tokenizer_lock = threading.Lock()
        self.hidden = int(str(config["hidden_size"]))
        self.heads = int(str(config["num_attention_heads"]))
        self.eps = float(str(config["layer_norm_eps"]))

        def get(key: str, transpose: bool = False) -> Array:
            value = tensors[key].astype(np.float32)
            return np.ascontiguousarray(value.T if transpose else value)

        def norm(prefix: str) -> tuple[Array, Array]:
            return get(f"{prefix}.LayerNorm.weight"), get(f"{prefix}.LayerNorm.bias")

        self.words = get("embeddings.word_embeddings.weight")
        self.positions = get("embeddings.position_embeddings.weight")
        self.types = get("embeddings.token_type_embeddings.weight")
        self.norm0 = norm("embeddings")
        self.layers: list[_Layer] = []
        for n in range(int(str(config["num_hidden_layers"]))):
            at = f"encoder.layer.{n}"
            parts = [f"{at}.attention.self.{part}" for part in ("query", "key", "value")]
            self.layers.append(
                _Layer(
                    qkv=np.ascontiguousarray(np.concatenate([get(f"{p}.weight") for p in parts]).T),
                    qkv_bias=np.concatenate([get(f"{p}.bias") for p in parts]),
                    out=get(f"{at}.attention.output.dense.weight", transpose=True),
                    out_bias=get(f"{at}.attention.output.dense.bias"),
                    norm1=norm(f"{at}.attention.output"),
                    up=get(f"{at}.intermediate.dense.weight", transpose=True),
                    up_bias=get(f"{at}.intermediate.dense.bias"),
                    down=get(f"{at}.output.dense.weight", transpose=True),
                    down_bias=get(f"{at}.output.dense.bias"),
                    norm2=norm(f"{at}.output"),
                )
            )

    @classmethod
    def load(cls, folder: Traversable) -> MiniLM:
        """From the model's folder: tokenizer.json, config.json, model.safetensors."""
        tokenizer = tokenizers.Tokenizer.from_str(
            folder.joinpath("tokenizer.json").read_text(encoding="utf-8")
        )
        tokenizer.enable_truncation(max_length=MAX_PIECES)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the batch's longest
        config = json.loads(folder.joinpath("config.json").read_text(encoding="utf-8"))
        tensors = safetensors.numpy.load(folder.joinpath("model.safetensors").read_bytes())
        return cls(tokenizer, config, tensors)

    def encode(self, texts: list[str]) -> Array:
        """Unit vectors, (len(texts), hidden), for one batch of texts."""
        with self._tokenizer_lock:
            encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        batch, length = ids.shape
        x = self.words[ids] + self.positions[:length][None, :, :] + self.types[types]
        # Rows of (batch * length, hidden) between the attentions: one matrix product each.
        x = _layer_norm(x, self.norm0, self.eps).reshape(batch * length, self.hidden)
        # Padding is kept out of every attention by the lowest score there is (as BERT does).
        hide = (np.float32(1.0) - mask)[:, None, None, :] * np.finfo(np.float32).min
        size = self.hidden // self.heads
        scale = np.float32(1.0 / math.sqrt(size))
        for layer in self.layers:
            qkv = (x @ layer.qkv + layer.qkv_bias).reshape(batch, length, 3, self.heads, size)
            qkv = qkv.transpose(2, 0, 3, 1, 4)  # (3, batch, heads, length, size)
            query, key, value = qkv[0], qkv[1], qkv[2]
            scores = (query @ key.transpose(0, 1, 3, 2)) * scale + hide
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ value).transpose(0, 2, 1, 3).reshape(batch * length, self.hidden)
            x = _layer_norm(context @ layer.out + layer.out_bias + x, layer.norm1, self.eps)
            up = _gelu(x @ layer.up + layer.up_bias)
            x = _layer_norm(up @ layer.down + layer.down_bias + x, layer.norm2, self.eps)
        counts = np.maximum(mask.sum(axis=1), np.float32(1e-9))[:, None]
        pooled = (x.reshape(batch, length, self.hidden) * mask[:, :, None]).sum(axis=1) / counts
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.maximum(norms, np.float32(1e-12)), dtype=np.float32)


def _layer_norm(x: Array, weights: tuple[Array, Array], eps: float) -> Array:
    centred: Array = x - x.mean(axis=-1, keepdims=True)
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    centred /= np.sqrt(variance + np.float32(eps))
    centred *= weights[0]
    centred += weights[1]
    return centred


# Abramowitz and Stegun 7.1.26: erf(z) = 1 - (a1 t + ... + a5 t^5) exp(-z^2), t = 1/(1 + p z).
_A1, _A2, _A3, _A4, _A5 = (
    np.float32(a) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
)
_P = np.float32(0.3275911)
_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))


def _gelu(x: Array) -> Array:
    """BERT's exact GELU, x/2 (1 + erf(x/√2)), not the tanh approximation (off by up to 1e-3).

    numpy has no erf: A&S 7.1.26, whose error (under 1.5e-7) is within float32's own rounding
    of these values. In place where it can: the largest arrays of the forward pass through here.
    """
    z = np.abs(x)
    z *= _SQRT_HALF
    t = _P * z
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    poly = _A5 * t
    for a in (_A4, _A3, _A2, _A1):
        poly += a
        poly *= t
    z *= z
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x|/√2)
    np.subtract(np.float32(1.0), poly, out=poly)
    np.copysign(poly, x, out=poly)  # erf(x/√2)
    poly += np.float32(1.0)
    poly *= x
    poly *= np.float32(0.5)
    return poly
