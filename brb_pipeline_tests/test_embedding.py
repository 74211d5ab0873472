"""Embedding: real MLX on the bundled MiniLM model, checked against an independent numpy BERT."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import erf
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

from brb_pipeline.core.embedding import blas
from brb_pipeline.core.embedding.models import (
    HashEmbedder,
    MLXEmbedder,
    ModelNotAvailableError,
    load_embedder,
    resolve_model,
    token_budget_batches,
)
from brb_pipeline.config.settings import Settings

TEXTS = [
    "Conversation with Ayşe, 2018-05-02 19:38–19:52\nAyşe (19:38): are we still on for dinner tomorrow?\nBen (19:40): yes! 7pm at the usual place",
    "hi",
    "Ben (09:12): the ferry to Zanzibar leaves at 8, don't be late 🙂",
    "Noor (22:01): مرحبا، كيف حالك؟ Omar (22:03): بخير، شكرا",
    "Kemal (10:00): yarın toplantı saat 3'te, unutma. Elif (10:05): tamam, görüşürüz",
]


@pytest.fixture(scope="module")
def fast() -> MLXEmbedder:
    return MLXEmbedder("bundled:all-MiniLM-L6-v2", backend="fast")


@pytest.fixture(scope="module")
def reference() -> MLXEmbedder:
    return MLXEmbedder("bundled:all-MiniLM-L6-v2", backend="reference")


# -- an independent reference: BERT forward in numpy from the safetensors file -----------------
def _numpy_bert(model_dir: Path, texts: list[str], max_tokens: int = 256) -> np.ndarray:
    """Mean-pooled, normalized BERT embeddings computed with numpy only (exact erf GELU)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_tokens)
    nh = cfg["num_attention_heads"]
    eps = cfg["layer_norm_eps"]

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    out = []
    for enc in tok.encode_batch(texts):
        ids = np.array(enc.ids)
        n = len(ids)
        e = "embeddings."
        x = w[e + "word_embeddings.weight"][ids] + w[e + "position_embeddings.weight"][:n] + w[e + "token_type_embeddings.weight"][0]
        x = ln(x, e + "LayerNorm")
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q, k, v = (lin(x, p + f"attention.self.{m}").reshape(n, nh, -1).transpose(1, 0, 2) for m in ("query", "key", "value"))
            s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(1, 0, 2).reshape(n, -1)
            a = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = lin(a, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))
            x = ln(lin(h, p + "output.dense") + a, p + "output.LayerNorm")
        m = x.mean(0)
        out.append(m / np.linalg.norm(m))
    return np.array(out, np.float32)


def _cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# -- BLAS ----------------------------------------------------------------------------------------
def test_fast_blas_is_what_mlx_links_against():
    path = blas.ensure_fast_blas()
    assert path and "openblas" in path
    assert blas.ensure_fast_blas() == path  # idempotent
    # The global scope resolves cblas_sgemm to OpenBLAS's, so MLX's lookup gets it too.
    glob = ctypes.cast(ctypes.CDLL(None).cblas_sgemm, ctypes.c_void_p).value
    ob = ctypes.cast(ctypes.CDLL(path).cblas_sgemm, ctypes.c_void_p).value
    assert glob == ob


def test_fast_blas_warns_when_mlx_was_imported_first():
    code = "import logging, mlx.core; logging.basicConfig(); from brb_pipeline.core.embedding.blas import ensure_fast_blas; ensure_fast_blas()"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])
    assert "imported before ensure_fast_blas" in res.stderr


# -- shapes, order, batching ---------------------------------------------------------------------
def test_shapes_dtype_and_normalization(fast):
    v = fast.embed(TEXTS)
    assert v.shape == (len(TEXTS), 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    q = fast.embed_query("dinner tomorrow")
    assert q.shape == (384,) and q.dtype == np.float32
    assert fast.embed([]).shape == (0, 384)
    assert fast.document_prefix == "" and fast.query_prefix == ""  # MiniLM has no prefixes
    assert fast.count_tokens(["hi"]) == 3  # [CLS] hi [SEP]


def test_order_preserved_after_length_sorting(fast):
    # Lengths deliberately out of order so the sorted batches permute the rows.
    texts = [TEXTS[0] * 3, "ok", TEXTS[2], "a b c d e f g", TEXTS[0]]
    together = MLXEmbedder(backend="fast", token_budget=64).embed(texts)
    alone = np.concatenate([fast.embed([t]) for t in texts])
    assert _cos_rows(together, alone).min() > 0.9999


def test_token_budget_batches_never_exceed_budget():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=500)
    lengths[7] = 1000  # longer than the budget: must be alone in its batch
    budget = 512
    batches = token_budget_batches(lengths, budget)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(500))  # every row exactly once
    for b in batches:
        assert len(b) == 1 or len(b) * lengths[b].max() <= budget
    assert [7] in [b.tolist() for b in batches]
    maxes = [lengths[b].max() for b in batches]
    assert maxes == sorted(maxes)  # length-sorted
    assert token_budget_batches(np.array([], np.int64), budget) == []


# -- correctness -----------------------------------------------------------------------------------
def test_fast_and_reference_match_an_independent_numpy_bert(fast, reference):
    texts = TEXTS[:4]
    exact = _numpy_bert(fast.model_dir, texts)
    vf = fast.embed(texts)
    vr = reference.embed(texts)
    assert _cos_rows(vf, vr).min() >= 0.999
    assert _cos_rows(vf, exact).min() >= 0.999
    assert _cos_rows(vr, exact).min() >= 0.999
    # And the vectors mean something: the two Arabic/Turkish lines are not the dinner plan.
    assert vf[0] @ vf[0] > vf[0] @ vf[3]


def test_odd_inputs_embed_without_crashing(fast):
    big = ("word " * 200_000)[:1_000_000]
    texts = ["", "🙂🎉🙂", "שלום עולם، مرحبا", big, "\n\t  "]
    v = fast.embed(texts)
    assert v.shape == (5, 384)
    assert np.isfinite(v).all()
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert fast.count_tokens([big]) == fast.max_tokens  # truncated


def test_model_id_stable_and_differs_per_model(fast, tmp_path):
    assert fast.model_id.startswith("all-MiniLM-L6-v2@") and len(fast.model_id.split("@")[1]) == 8
    assert MLXEmbedder(backend="fast").model_id == fast.model_id
    # A different (tiny, random) BERT with the same tokenizer: different id, fast path still runs.
    tiny = tmp_path / "tiny-bert"
    tiny.mkdir()
    (tiny / "tokenizer.json").write_bytes((fast.model_dir / "tokenizer.json").read_bytes())
    cfg = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 64, "max_position_embeddings": 64, "vocab_size": 30522,
           "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
    (tiny / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(1)
    w = {"embeddings.word_embeddings.weight": (30522, 32), "embeddings.position_embeddings.weight": (64, 32),
         "embeddings.token_type_embeddings.weight": (2, 32)}
    for i in range(2):
        p = f"encoder.layer.{i}."
        for m in ("query", "key", "value"):
            w[p + f"attention.self.{m}.weight"] = (32, 32)
            w[p + f"attention.self.{m}.bias"] = (32,)
        w |= {p + "attention.output.dense.weight": (32, 32), p + "attention.output.dense.bias": (32,),
              p + "intermediate.dense.weight": (64, 32), p + "intermediate.dense.bias": (64,),
              p + "output.dense.weight": (32, 64), p + "output.dense.bias": (32,)}
    tensors = {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in w.items()}
    for p in ["embeddings."] + [f"encoder.layer.{i}.attention.output." for i in range(2)] + [f"encoder.layer.{i}.output." for i in range(2)]:
        tensors[p + "LayerNorm.weight"] = np.ones(32, np.float32)
        tensors[p + "LayerNorm.bias"] = np.zeros(32, np.float32)
    save_file(tensors, str(tiny / "model.safetensors"))
    other = MLXEmbedder(str(tiny), backend="fast", max_tokens=256)
    assert other.backend == "fast" and other.dim == 32
    assert other.max_tokens == 64  # capped at the model's positions
    assert other.model_id.startswith("tiny-bert@") and other.model_id != fast.model_id
    v = other.embed(TEXTS[:3])
    assert v.shape == (3, 32)
    assert _cos_rows(v, _numpy_bert(tiny, TEXTS[:3], max_tokens=64)).min() >= 0.999


# -- hash embedder, settings, errors --------------------------------------------------------------
def test_hash_embedder_is_deterministic_and_honest():
    h = HashEmbedder()
    a = h.embed(["the ferry to zanzibar", "the ferry to zanzibar leaves at eight", "quantum chromodynamics"])
    b = HashEmbedder().embed(["the ferry to zanzibar", "the ferry to zanzibar leaves at eight", "quantum chromodynamics"])
    np.testing.assert_array_equal(a, b)
    assert h.model_id == "hash-384" and a.shape == (3, 384) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    assert a[0] @ a[1] > a[0] @ a[2]  # shared words are closer
    assert h.embed([]).shape == (0, 384)
    assert np.isfinite(h.embed([""])).all()


def test_load_embedder_from_settings(tmp_path):
    emb = load_embedder(Settings(home=tmp_path, embedding_model="hash").embedding)
    assert isinstance(emb, HashEmbedder) and emb.dim == 384
    assert load_embedder(Settings(home=tmp_path, embedding_model="hash-64").embedding).dim == 64


@pytest.mark.parametrize("name", [
    "nobody-here/no-such-model",  # a repo id not in the local HF cache
    "bundled:no-such-model",  # not a bundled model
    "/no/such/dir",  # a missing path
])
def test_model_not_available_offline_is_a_clear_error(name, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotAvailableError) as err:
        resolve_model(name)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("Embedding - ")
    with pytest.raises(ValueError):
        MLXEmbedder(backend="quantum")
