"""A BERT encoder forward for MLX's GPU backends (Metal, CUDA), for sentence embeddings.

Same math as :mod:`~brb_pipeline.core.embedding.fast_bert` (mean pooling + L2 norm over a
Hugging Face BERT), arranged for a GPU instead of a CPU:

- weights in ``float16`` (or ``bfloat16`` / ``float32``), quantized checkpoints kept quantized
  (``mx.quantized_matmul``: the GPU backends have kernels for it);
- one fused QKV projection, ``mx.fast.scaled_dot_product_attention`` with a boolean padding
  mask, ``mx.fast.layer_norm``, exact-erf GELU, pooling in float32;
- everything in MLX ops on one device, evaluated once per batch, so nothing leaves the device
  until the pooled (rows, hidden) result.

Written against the device, not the GPU: ``device=mx.cpu`` runs the same graph on MLX's CPU
backend (slowly), which is how the tests check it against the CPU fast path on a machine
without a GPU.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from brb_pipeline.core.embedding.blas import ensure_fast_blas
from brb_pipeline.core.embedding.weights import BertConfig, QuantizedWeight, load_weights

ensure_fast_blas()

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}


class _Linear:
    """``x @ W.T + b`` for a float or a kept-quantized weight."""

    def __init__(self, weight: Any, bias: mx.array, dtype: mx.Dtype) -> None:
        self.bias = bias.astype(dtype)
        if isinstance(weight, QuantizedWeight):
            self.quantized = QuantizedWeight(weight.w, weight.scales.astype(dtype), weight.biases.astype(dtype),
                                             weight.group_size, weight.bits)
            self.wt = None
        else:
            self.quantized = None
            self.wt = mx.contiguous(weight.astype(dtype).T)

    def __call__(self, x: mx.array) -> mx.array:
        if self.quantized is not None:
            return self.quantized.matmul(x) + self.bias
        return mx.addmm(self.bias, x, self.wt)

    def arrays(self) -> list[mx.array]:
        q = self.quantized
        return [self.bias, *((q.w, q.scales, q.biases) if q is not None else (self.wt,))]


def _fuse_qkv(w: dict[str, Any], a: str) -> tuple[Any, mx.array]:
    """The query, key and value projections as one (3*hidden, hidden) weight and its bias."""
    parts = [w[a + f"self.{m}.weight"] for m in ("query", "key", "value")]
    bias = mx.concatenate([w[a + f"self.{m}.bias"] for m in ("query", "key", "value")])
    if isinstance(parts[0], QuantizedWeight):
        fused = QuantizedWeight(*(mx.concatenate([getattr(p, f) for p in parts]) for f in ("w", "scales", "biases")),
                                parts[0].group_size, parts[0].bits)
        return fused, bias
    return mx.concatenate(parts), bias


class GpuBert:
    """Mean-pooled, L2-normalized BERT sentence embeddings on one MLX device.

    Args:
        model_dir: a Hugging Face BERT directory, or the same quantized by MLX.
        device: ``mx.gpu`` (default) or ``mx.cpu`` (tests).
        dtype: ``"float16"``, ``"bfloat16"`` or ``"float32"`` for weights and activations.
        keep_quantized: run a quantized checkpoint's linears with ``mx.quantized_matmul``
            (else they are dequantized at load).
    """

    def __init__(self, model_dir: Path, *, device: Any = None, dtype: str = "float16",
                 keep_quantized: bool = True) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        self.model_dir = Path(model_dir)
        self.config = BertConfig.from_dir(self.model_dir)
        self.dim = self.config.hidden_size
        self.device = mx.gpu if device is None else device
        self.dtype = DTYPES[dtype]
        with mx.stream(self.device):
            self._load(load_weights(self.model_dir, self.config, keep_quantized=keep_quantized))

    def bytes_per_token(self, max_tokens: int) -> int:
        """Activation bytes one token of a batch holds at peak (QKV, residual, FFN, scores)."""
        c = self.config
        elems = 6 * c.hidden_size + 2 * c.intermediate_size + c.num_heads * max_tokens
        return int(elems * self.dtype.size)

    def _load(self, w: dict[str, Any]) -> None:
        dt = self.dtype
        e = "embeddings."
        self.word = w[e + "word_embeddings.weight"].astype(dt)
        self.pos = w[e + "position_embeddings.weight"].astype(dt)
        self.type0 = w[e + "token_type_embeddings.weight"][0].astype(dt)
        self.emb_ln = (w[e + "LayerNorm.weight"].astype(dt), w[e + "LayerNorm.bias"].astype(dt))
        self.layers = []
        for i in range(self.config.num_layers):
            p = f"encoder.layer.{i}."
            a = p + "attention."
            self.layers.append({
                "qkv": _Linear(*_fuse_qkv(w, a), dt),
                "o": _Linear(w[a + "output.dense.weight"], w[a + "output.dense.bias"], dt),
                "ln1": (w[a + "output.LayerNorm.weight"].astype(dt), w[a + "output.LayerNorm.bias"].astype(dt)),
                "i": _Linear(w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"], dt),
                "f": _Linear(w[p + "output.dense.weight"], w[p + "output.dense.bias"], dt),
                "ln2": (w[p + "output.LayerNorm.weight"].astype(dt), w[p + "output.LayerNorm.bias"].astype(dt)),
            })
        mx.eval(self.word, self.pos, self.type0, self.emb_ln,
                [[lin.arrays() for lin in (ly["qkv"], ly["o"], ly["i"], ly["f"])] + [ly["ln1"], ly["ln2"]]
                 for ly in self.layers])

    def embed_batch(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Embed one right-padded batch: (rows, seq_len) ids, (rows,) lengths -> (rows, hidden)
        float32, L2-normalized."""
        with mx.stream(self.device):
            out = self._forward(mx.array(ids.astype(np.int32)), mx.array(lengths.astype(np.int32)))
            mx.eval(out)
        return np.array(out, dtype=np.float32)

    def _forward(self, ids: mx.array, lengths: mx.array) -> mx.array:
        c = self.config
        B, L = ids.shape
        eps = c.layer_norm_eps
        valid = mx.arange(L)[None, :] < lengths[:, None]  # (B, L)
        mask = valid[:, None, None, :]  # boolean: True = attend
        x = mx.fast.layer_norm(self.word[ids] + (self.pos[:L] + self.type0)[None], *self.emb_ln, eps)
        for ly in self.layers:
            qkv = ly["qkv"](x).reshape(B, L, 3, c.num_heads, c.head_dim).transpose(2, 0, 3, 1, 4)
            ctx = mx.fast.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], scale=1.0 / math.sqrt(c.head_dim),
                                                       mask=mask)
            ctx = ctx.transpose(0, 2, 1, 3).reshape(B, L, c.hidden_size)
            a = mx.fast.layer_norm(ly["o"](ctx) + x, *ly["ln1"], eps)
            h = ly["i"](a)
            h = 0.5 * h * (1.0 + mx.erf(h * (1.0 / math.sqrt(2.0))))
            x = mx.fast.layer_norm(ly["f"](h) + a, *ly["ln2"], eps)
        m = valid.astype(mx.float32)[:, :, None]
        pooled = (x.astype(mx.float32) * m).sum(axis=1) / mx.maximum(m.sum(axis=1), 1.0)
        return pooled / mx.maximum(mx.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
