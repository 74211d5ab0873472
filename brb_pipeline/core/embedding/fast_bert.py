"""A BERT encoder forward written for MLX's CPU backend (Linux), for sentence embeddings.

Same math as ``mlx_embeddings.models.bert`` + mean pooling + L2 norm, arranged around what MLX's
Linux CPU backend does well (GEMMs, through OpenBLAS: see :mod:`brb_pipeline.core.embedding.blas`) and
what it does badly: the GEMMs run at BLAS speed, while MLX's exact-erf GELU and ``mx.softmax``
are scalar calls per element (also when ``mx.compile``-d), several times slower than numpy's SIMD
exp/tanh over the same buffers (per-op figures: ``benchmarks/bench_embedding.py`` and docs/benchmarks.md).

What this forward does about it:

- **Two MLX CPU streams**: each batch is split into two row groups evaluated on separate
  streams, which MLX runs on separate threads, so the non-GEMM work uses both cores. OpenBLAS is
  set to one thread meanwhile (the caller, :class:`~brb_pipeline.core.embedding.models.MLXEmbedder`,
  does it) so the two streams' GEMMs do not oversubscribe the cores.
- **One fused QKV GEMM** per layer with ``1/sqrt(head_dim)`` folded into the query weights;
  contiguous Q, K^T, V so MLX's batched matmuls take their fast path.
- **Softmax and GELU by numpy in place** (``elementwise="numpy"``, default): after MLX has
  evaluated the scores / the FFN pre-activation, numpy rewrites those buffers through zero-copy
  views (one thread per row group), then MLX continues with the probabilities / activations.
  GEMMs, layer norms, residuals and pooling stay on MLX. The GELU is the tanh form
  (cosine >= 0.99999 to exact-erf embeddings); ``elementwise="mlx"`` keeps everything in MLX
  (``gelu="erf"`` exact or ``"tanh"`` via a rational tanh, both ``mx.compile``-d).
- Rows are length-sorted and batched by a token budget by the caller, so padding is small;
  attention runs on the padded [rows, heads, L, L] layout of each batch.
- Quantized checkpoints are dequantized once at load (:mod:`~brb_pipeline.core.embedding.weights`),
  so their GEMMs go through BLAS too.

It runs on the CPU only; :mod:`~brb_pipeline.core.embedding.gpu_bert` is the GPU forward. MLX
streams belong to the thread that made them, so each calling thread gets its own pair.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from brb_pipeline.core.embedding.blas import ensure_fast_blas, set_blas_threads
from brb_pipeline.core.embedding.weights import BertConfig, load_weights

ensure_fast_blas()

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

# Eigen's rational approximation of tanh on [-7.9, 7.9] (float accuracy), written with ops
# that mx.compile fuses into one loop (no libm call per element).
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _tanh_rational(x: mx.array) -> mx.array:
    x = mx.clip(x, -7.90531110763549805, 7.90531110763549805)
    x2 = x * x
    p = x2 * _TANH_P[0] + _TANH_P[1]
    for c in _TANH_P[2:]:
        p = p * x2 + c
    q = x2 * _TANH_Q[0] + _TANH_Q[1]
    for c in _TANH_Q[2:]:
        q = q * x2 + c
    return x * p / q


def _gelu_tanh(x: mx.array) -> mx.array:
    return 0.5 * x * (1.0 + _tanh_rational(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def _gelu_erf(x: mx.array) -> mx.array:
    return 0.5 * x * (1.0 + mx.erf(x * (1.0 / math.sqrt(2.0))))


def _bias_gelu(h: mx.array, b: mx.array, kind: str) -> mx.array:
    h = h + b
    return _gelu_erf(h) if kind == "erf" else _gelu_tanh(h)


def _masked_softmax(scores: mx.array, mask_bias: mx.array) -> mx.array:
    s = scores + mask_bias
    e = mx.exp(s - mx.max(s, axis=-1, keepdims=True))
    return e / mx.sum(e, axis=-1, keepdims=True)


class FastBert:
    """Mean-pooled, L2-normalized BERT sentence embeddings on MLX.

    Args:
        model_dir: a Hugging Face BERT directory (``config.json`` + ``*.safetensors``), or the
            same quantized by MLX.
        streams: MLX CPU streams a batch is split over (2 uses both cores for non-GEMM work).
        elementwise: ``"numpy"`` (softmax + tanh GELU by numpy in place, fastest) or ``"mlx"``.
        gelu: for ``elementwise="mlx"``: ``"erf"`` (exact, as trained) or ``"tanh"``.
        compile: for ``elementwise="mlx"``: fuse elementwise chains with ``mx.compile``.
        blas_threads: if given, set OpenBLAS's (process-wide) thread count.
    """

    def __init__(self, model_dir: Path, *, gelu: str = "erf", streams: int = 2, compile: bool = True,
                 elementwise: str = "numpy", blas_threads: int | None = None):
        if gelu not in ("erf", "tanh"):
            raise ValueError(f"gelu must be 'erf' or 'tanh', got {gelu!r}")
        self.model_dir = Path(model_dir)
        self.config = BertConfig.from_dir(self.model_dir)
        self.dim = self.config.hidden_size
        self.gelu = gelu
        self._n_streams = max(1, streams)
        self._thread_streams: dict[int, list] = {}
        if elementwise not in ("numpy", "mlx"):
            raise ValueError(f"elementwise must be 'numpy' or 'mlx', got {elementwise!r}")
        self.elementwise = elementwise
        if blas_threads:
            set_blas_threads(blas_threads)
        self._pool = ThreadPoolExecutor(self._n_streams) if self._n_streams > 1 else None
        self._load_weights()
        if compile:
            self._bias_gelu = mx.compile(lambda h, b: _bias_gelu(h, b, self.gelu))
            self._softmax = mx.compile(_masked_softmax)
        else:
            self._bias_gelu = lambda h, b: _bias_gelu(h, b, self.gelu)
            self._softmax = _masked_softmax

    @property
    def streams(self) -> list:
        """The calling thread's MLX CPU streams (made on its first call)."""
        tid = threading.get_ident()
        if tid not in self._thread_streams:
            n = self._n_streams
            self._thread_streams[tid] = [mx.new_stream(mx.cpu) for _ in range(n)] if n > 1 else [mx.default_stream(mx.cpu)]
        return self._thread_streams[tid]

    def _load_weights(self) -> None:
        w = {k: v.astype(mx.float32) for k, v in load_weights(self.model_dir, self.config).items()}
        c = self.config
        e = "embeddings."
        self.word = w[e + "word_embeddings.weight"]
        self.pos = w[e + "position_embeddings.weight"]
        self.type0 = w[e + "token_type_embeddings.weight"][0]
        self.emb_ln = (w[e + "LayerNorm.weight"], w[e + "LayerNorm.bias"])
        self.layers = []
        for i in range(c.num_layers):
            p = f"encoder.layer.{i}."
            a = p + "attention."
            # Weights stored [in, out] and contiguous so every GEMM is a plain x @ W.
            # The 1/sqrt(head_dim) score scale is folded into the query weights and bias.
            scale = 1.0 / math.sqrt(c.hidden_size // c.num_heads)
            qkv_w = mx.concatenate(
                [w[a + "self.query.weight"] * scale, w[a + "self.key.weight"], w[a + "self.value.weight"]], axis=0
            ).T
            qkv_b = mx.concatenate([w[a + "self.query.bias"] * scale, w[a + "self.key.bias"], w[a + "self.value.bias"]])
            layer = {
                "qkv_w": mx.contiguous(qkv_w), "qkv_b": qkv_b,
                "o_w": mx.contiguous(w[a + "output.dense.weight"].T), "o_b": w[a + "output.dense.bias"],
                "ln1": (w[a + "output.LayerNorm.weight"], w[a + "output.LayerNorm.bias"]),
                "i_w": mx.contiguous(w[p + "intermediate.dense.weight"].T), "i_b": w[p + "intermediate.dense.bias"],
                "f_w": mx.contiguous(w[p + "output.dense.weight"].T), "f_b": w[p + "output.dense.bias"],
                "ln2": (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
            }
            self.layers.append(layer)
        mx.eval(self.word, self.pos, self.type0, self.emb_ln, self.layers)

    # ------------------------------------------------------------------------------------
    def embed_batch(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Embed one padded batch.

        Args:
            ids: (rows, seq_len) int token ids, right-padded; ``seq_len`` <= max positions.
            lengths: (rows,) number of real tokens per row (>= 1).

        Returns:
            (rows, hidden) float32, L2-normalized mean-pooled embeddings.
        """
        rows = ids.shape[0]
        streams = self.streams
        n = len(streams)
        # Contiguous row groups, one per stream; tiny batches stay on one stream.
        parts = [p for p in np.array_split(np.arange(rows), n) if len(p)] if rows >= 2 * n else [np.arange(rows)]
        states = []
        for stream, idx in zip(streams, parts):
            sub_len = lengths[idx]
            L = int(sub_len.max())
            with mx.stream(stream):
                states.append(self._start(mx.array(ids[idx, :L].astype(np.int32)), mx.array(sub_len.astype(np.int32)), stream))
        for li in range(self.config.num_layers):
            if self.elementwise == "numpy":
                self._layer_numpy(states, li)
            else:
                for st in states:
                    with mx.stream(st.stream):
                        probs = self._softmax(self._scores(st, li), st.mask_mx)
                        a = self._attn_out(st, li, probs)
                        ly = self.layers[li]
                        h = self._bias_gelu(a @ ly["i_w"], ly["i_b"])
                        self._ffn_out(st, li, a, h)
        outs = []
        for st in states:
            with mx.stream(st.stream):
                outs.append(self._pool_out(st))
        mx.eval(outs)
        return np.concatenate([np.array(o) for o in outs], axis=0)

    def _start(self, ids: mx.array, lengths: mx.array, stream) -> "_State":
        c = self.config
        B, L = ids.shape
        valid = mx.arange(L)[None, :] < lengths[:, None]  # (B, L) bool
        x = self.word[ids] + (self.pos[:L] + self.type0)[None]
        x = mx.fast.layer_norm(x, *self.emb_ln, c.layer_norm_eps).reshape(B * L, c.hidden_size)
        mask_np = np.where(np.arange(L)[None, :] < np.array(lengths)[:, None], 0.0, -1e9).astype(np.float32)
        return _State(stream=stream, B=B, L=L, valid=valid, x=x,
                      mask_mx=mx.array(mask_np)[:, None, None, :], mask_np=mask_np[:, None, None, :])

    def _scores(self, st: "_State", li: int) -> mx.array:
        """Raw attention scores (B, nh, L, L), scaled, unmasked; keeps V on the state."""
        c = self.config
        ly = self.layers[li]
        nh, hd = c.num_heads, c.hidden_size // c.num_heads
        qkv = mx.addmm(ly["qkv_b"], st.x, ly["qkv_w"]).reshape(st.B, st.L, 3, nh, hd)
        # Contiguous operands: MLX's batched matmul is faster on them than on transposed views.
        q = mx.contiguous(qkv[:, :, 0].transpose(0, 2, 1, 3))  # (B, nh, L, hd), pre-scaled
        kt = mx.contiguous(qkv[:, :, 1].transpose(0, 2, 3, 1))  # (B, nh, hd, L)
        st.v = mx.contiguous(qkv[:, :, 2].transpose(0, 2, 1, 3))  # (B, nh, L, hd)
        return q @ kt

    def _layer_numpy(self, states: list["_State"], li: int) -> None:
        """One layer with softmax and GELU done by numpy in place on evaluated MLX buffers.

        MLX's CPU exp/erf/tanh run scalar (~13 ns/element, measured); numpy's SIMD versions
        ~1-3 ns. GEMMs, layer norms and residuals stay on MLX; numpy only rewrites buffers
        MLX has already evaluated (zero-copy views), one thread per row group.
        """
        ly = self.layers[li]
        scores = []
        for st in states:
            with mx.stream(st.stream):
                scores.append(self._scores(st, li))
        mx.eval(scores)
        self._map(_softmax_inplace, [np.asarray(sc) for sc in scores], [st.mask_np for st in states])
        attn, pre = [], []
        for st, sc in zip(states, scores):
            with mx.stream(st.stream):
                a = self._attn_out(st, li, sc)
                attn.append(a)
                pre.append(mx.addmm(ly["i_b"], a, ly["i_w"]))  # (B*L, intermediate)
        mx.eval(pre)
        self._map(_gelu_tanh_inplace, [np.asarray(h) for h in pre])
        for st, a, h in zip(states, attn, pre):
            with mx.stream(st.stream):
                self._ffn_out(st, li, a, h)

    def _map(self, fn, *args) -> None:
        if self._pool and len(args[0]) > 1:
            list(self._pool.map(fn, *args))
        else:
            for xs in zip(*args):
                fn(*xs)

    def _attn_out(self, st: "_State", li: int, probs: mx.array) -> mx.array:
        ly = self.layers[li]
        ctx = (probs @ st.v).transpose(0, 2, 1, 3).reshape(st.B * st.L, self.config.hidden_size)
        return mx.fast.layer_norm(mx.addmm(ly["o_b"], ctx, ly["o_w"]) + st.x, *ly["ln1"], self.config.layer_norm_eps)

    def _ffn_out(self, st: "_State", li: int, a: mx.array, h: mx.array) -> None:
        ly = self.layers[li]
        st.x = mx.fast.layer_norm(mx.addmm(ly["f_b"], h, ly["f_w"]) + a, *ly["ln2"], self.config.layer_norm_eps)

    def _pool_out(self, st: "_State") -> mx.array:
        x = st.x.reshape(st.B, st.L, self.config.hidden_size)
        m = st.valid.astype(mx.float32)[:, :, None]
        pooled = (x * m).sum(axis=1) / mx.maximum(m.sum(axis=1), 1.0)
        return pooled / mx.maximum(mx.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


@dataclass
class _State:
    """One row group's activations between layers."""

    stream: object
    B: int
    L: int
    valid: mx.array  # (B, L) bool
    x: mx.array  # (B*L, hidden)
    mask_mx: mx.array  # (B, 1, 1, L) additive
    mask_np: np.ndarray  # (B, 1, 1, L) additive
    v: mx.array | None = None  # (B, nh, L, hd) values of the current layer


def _softmax_inplace(s: np.ndarray, mask: np.ndarray) -> None:
    """Masked softmax over the last axis, in place. s: (B, nh, L, L); mask: (B, 1, 1, L)."""
    s += mask
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)


_GELU_BLOCK_ROWS = 128  # rows per pass so the temporaries stay in L2


def _gelu_tanh_inplace(h: np.ndarray) -> None:
    """GELU (tanh form), in place, block by block. h: (tokens, intermediate) float32."""
    tmp = np.empty((min(_GELU_BLOCK_ROWS, h.shape[0]), h.shape[1]), np.float32)
    for i in range(0, h.shape[0], _GELU_BLOCK_ROWS):
        x = h[i : i + _GELU_BLOCK_ROWS]
        t = tmp[: x.shape[0]]
        np.multiply(x, x, out=t)
        t *= 0.044715
        t += 1.0
        t *= x
        t *= _SQRT_2_OVER_PI
        np.tanh(t, out=t)
        t += 1.0
        t *= 0.5
        x *= t
