"""BERT checkpoints for the two forwards: config, which models they run, and their weights.

Quantized checkpoints (mlx-community / mlx-embeddings format: ``<name>.weight`` packed into
uint32 with ``<name>.scales`` and ``<name>.biases``, ``"quantization": {"group_size", "bits"}``
in ``config.json``) are either dequantized once here (the CPU forward: MLX's CPU quantized
matmul is far slower than an fp32 GEMM through BLAS) or kept quantized for
``mx.quantized_matmul`` (the GPU forward, which has kernels for it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brb_pipeline.core.embedding.blas import ensure_fast_blas

ensure_fast_blas()

import mlx.core as mx  # noqa: E402

SUPPORTED_MODEL_TYPES = ("bert",)
_GELUS = ("gelu", "gelu_new", "gelu_pytorch_tanh")


@dataclass(frozen=True)
class BertConfig:
    """The subset of a Hugging Face BERT ``config.json`` the forwards need."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position: int
    layer_norm_eps: float
    hidden_act: str
    quantization: dict | None = None  # {"group_size": g, "bits": b[, "mode": m]} when quantized

    @classmethod
    def from_dir(cls, model_dir: Path) -> "BertConfig":
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        return cls(
            hidden_size=int(cfg["hidden_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=int(cfg["num_attention_heads"]),
            intermediate_size=int(cfg["intermediate_size"]),
            max_position=int(cfg.get("max_position_embeddings", 512)),
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
            hidden_act=str(cfg.get("hidden_act", "gelu")),
            quantization=cfg.get("quantization"),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def supports(model_dir: Path) -> bool:
    """True when ``model_dir`` holds a BERT (fp32/fp16/bf16 or affine-quantized) the forwards run."""
    model_dir = Path(model_dir)
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    quant = cfg.get("quantization")
    return (
        cfg.get("model_type") in SUPPORTED_MODEL_TYPES
        and (quant is None or (isinstance(quant, dict) and quant.get("mode", "affine") == "affine"))
        and cfg.get("hidden_act", "gelu") in _GELUS
        and cfg.get("position_embedding_type", "absolute") == "absolute"
        and any(model_dir.glob("*.safetensors"))
    )


@dataclass(frozen=True)
class QuantizedWeight:
    """A linear layer's weight kept quantized: ``x @ W.T`` is ``mx.quantized_matmul``."""

    w: mx.array
    scales: mx.array
    biases: mx.array
    group_size: int
    bits: int

    def matmul(self, x: mx.array) -> mx.array:
        return mx.quantized_matmul(x, self.w, self.scales, self.biases, transpose=True,
                                   group_size=self.group_size, bits=self.bits)

    def dequantized(self) -> mx.array:
        return mx.dequantize(self.w, self.scales, self.biases, group_size=self.group_size, bits=self.bits)


def load_weights(model_dir: Path, config: BertConfig, *, keep_quantized: bool = False) -> dict[str, Any]:
    """The checkpoint's tensors by name (``bert.`` prefix dropped, ``.scales``/``.biases`` folded).

    Args:
        keep_quantized: for a quantized checkpoint, linear weights (2-D, not ``embeddings.*``)
            stay :class:`QuantizedWeight`; otherwise every quantized tensor is dequantized
            here, once, to float32. Embedding tables are always dequantized (they are lookups).

    Returns:
        name -> ``mx.array`` (or :class:`QuantizedWeight`), evaluated.
    """
    raw: dict[str, mx.array] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        raw.update(mx.load(str(f)))
    raw = {k.removeprefix("bert."): v for k, v in raw.items()}
    q = config.quantization or {}
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name.endswith((".scales", ".biases")):
            continue
        base = name.removesuffix(".weight")
        if name.endswith(".weight") and base + ".scales" in raw:
            qw = QuantizedWeight(value, raw[base + ".scales"], raw[base + ".biases"],
                                 int(q.get("group_size", 64)), int(q.get("bits", 4)))
            out[name] = qw if keep_quantized and not name.startswith("embeddings.") else qw.dequantized()
        else:
            out[name] = value
    mx.eval([v if isinstance(v, mx.array) else (v.w, v.scales, v.biases) for v in out.values()])
    return out


def dequantize_model(model: Any) -> int:
    """Replace a loaded mlx-embeddings model's quantized layers by float ones, in place.

    For the reference forward on a CPU (any architecture mlx-embeddings loads). Returns how
    many layers were replaced.
    """
    import mlx.nn as nn
    from mlx.utils import tree_unflatten

    swaps = []
    for path, m in model.named_modules():
        if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            w = mx.dequantize(m.weight, m.scales, m.get("biases"), group_size=m.group_size, bits=m.bits,
                              mode=getattr(m, "mode", "affine"))
            if isinstance(m, nn.QuantizedLinear):
                new = nn.Linear(w.shape[1], w.shape[0], bias="bias" in m)
                if "bias" in m:
                    new.bias = m.bias
            else:
                new = nn.Embedding(w.shape[0], w.shape[1])
            new.weight = w
            swaps.append((path, new))
    if swaps:
        model.update_modules(tree_unflatten(swaps))
        mx.eval(model.parameters())
    return len(swaps)


def save_quantized(src: Path, out: Path, *, bits: int = 8, group_size: int = 64) -> Path:
    """Write ``src`` (a model directory mlx-embeddings loads) quantized by ``mlx.nn.quantize``
    to ``out`` in the mlx-community format: weights, ``quantization`` in ``config.json``, and
    the tokenizer files. For tests and benchmarks; returns ``out``."""
    import shutil

    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_embeddings.utils import load

    model, _ = load(str(src))
    nn.quantize(model, group_size=group_size, bits=bits)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    cfg = json.loads((Path(src) / "config.json").read_text())
    cfg["quantization"] = {"group_size": group_size, "bits": bits}
    (out / "config.json").write_text(json.dumps(cfg))
    for f in Path(src).iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab")):
            shutil.copy(f, out / f.name)
    return out
