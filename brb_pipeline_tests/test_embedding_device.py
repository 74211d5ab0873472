"""The embedder spec and its process cache, the device choice, the GPU forward (run on MLX's CPU
device where there is no GPU) and quantized checkpoints (dequantized on the CPU)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from brb_pipeline.orchestration.resources import Runtime
from brb_pipeline.core.embedding import models
from brb_pipeline.core.embedding.gpu_bert import GpuBert
from brb_pipeline.core.embedding.models import MLXEmbedder, load_embedder
from brb_pipeline.core.embedding.weights import save_quantized
from brb_pipeline.core.embedding.spec import DeviceNotAvailableError, EmbedderSpec, resolve_device
from brb_pipeline.stages.embed import configured_model_id
from brb_pipeline.config.settings import Settings

import mlx.core as mx  # noqa: E402  (after the embedding modules: they load OpenBLAS first)

HAS_GPU = mx.is_available(mx.gpu)
TEXTS = [
    "Conversation with Ayşe, 2018-05-02 19:38–19:52\nAyşe (19:38): are we still on for dinner tomorrow?",
    "hi",
    "Ben (09:12): the ferry to Zanzibar leaves at 8, don't be late 🙂",
    "Noor (22:01): مرحبا، كيف حالك؟ Omar (22:03): بخير، شكرا",
]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def cpu_fast() -> MLXEmbedder:
    return MLXEmbedder(device="cpu")


@pytest.fixture(scope="module")
def quantized_dir(tmp_path_factory, cpu_fast) -> Path:
    """The bundled MiniLM quantized to 8 bits by ``mlx.nn.quantize``, saved as mlx-community does."""
    return save_quantized(cpu_fast.model_dir, tmp_path_factory.mktemp("minilm-8bit"), bits=8, group_size=64)


# -- one spec, one cache --------------------------------------------------------------------------
def test_one_spec_and_one_cache_for_every_caller(tmp_path, monkeypatch):
    monkeypatch.setenv("BRB_EMBEDDING_DEVICE", "cpu")
    s = Settings.load(tmp_path, embedding_model="hash-48")
    spec = s.embedding
    assert spec == EmbedderSpec(model="hash-48", backend="fast", max_tokens=256, token_budget=8192, device="cpu")
    emb = load_embedder(s.embedding)
    assert load_embedder(spec) is emb and Runtime().embedder(s) is emb
    assert configured_model_id(s) == emb.model_id == "hash-48"
    given = models.HashEmbedder(dim=8)
    assert Runtime(embedder=given).embedder(s) is given
    assert load_embedder(Settings.load(tmp_path, embedding_model="hash-64").embedding) is not emb


def test_a_shared_embedder_works_from_another_thread(cpu_fast):
    here = cpu_fast.embed(TEXTS)
    there: dict = {}
    t = threading.Thread(target=lambda: there.setdefault("v", cpu_fast.embed(TEXTS)))
    t.start()
    t.join()
    np.testing.assert_allclose(there["v"], here, atol=1e-6)


# -- devices --------------------------------------------------------------------------------------
def test_auto_takes_mlx_default_device_and_cpu_forces_the_fast_path(cpu_fast):
    assert resolve_device("auto") == ("gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu")
    assert resolve_device("CPU") == "cpu"
    assert cpu_fast.device == "cpu" and cpu_fast.forward == "fast_bert"
    assert load_embedder(EmbedderSpec("hash")).device == "cpu"


@pytest.mark.parametrize("asked", ["gpu", "tpu"])
def test_a_device_that_is_not_there_is_a_one_line_error(asked):
    if asked == "gpu" and HAS_GPU:
        pytest.skip("MLX has a GPU here: forcing gpu is valid")
    with pytest.raises(DeviceNotAvailableError) as err:
        MLXEmbedder(device=asked)
    msg = str(err.value)
    assert msg.startswith("Embedding - ") and "\n" not in msg


def test_the_cpu_fast_path_is_never_chosen_on_a_gpu_device(monkeypatch):
    """With the device resolved to a GPU, the BERT forward is gpu_bert. Here MLX has no GPU, so
    the "gpu" runs on MLX's CPU device (there or not): what is checked is the choice, and that
    it embeds."""
    monkeypatch.setattr(models, "resolve_device", lambda asked: "gpu")
    monkeypatch.setattr(models, "mlx_device", lambda name: mx.cpu)
    monkeypatch.setattr(models, "gpu_token_budget", lambda configured, per_token: configured * 4)
    emb = MLXEmbedder(device="gpu", gpu_dtype="float32")
    assert emb.device == "gpu" and emb.forward == "gpu_bert float32"
    assert isinstance(emb._fast, GpuBert) and emb.token_budget == 4 * 8192
    v = emb.embed(TEXTS[:2])
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


@pytest.mark.skipif(not HAS_GPU, reason="MLX reports no GPU on this machine (CPU-only mlx build)")
def test_gpu_path_on_a_real_gpu_matches_the_cpu_fast_path(cpu_fast):
    gpu = MLXEmbedder(device="gpu")
    assert gpu.device == "gpu" and gpu.forward.startswith("gpu_bert") and isinstance(gpu._fast, GpuBert)
    assert _cos(gpu.embed(TEXTS), cpu_fast.embed(TEXTS)).min() >= 0.999


# -- the GPU forward, run on MLX's CPU device ------------------------------------------------------
def test_gpu_forward_matches_the_fast_path_in_fp32(cpu_fast):
    ids = cpu_fast.tokenize(TEXTS)
    lengths = np.array([len(x) for x in ids])
    batch = np.zeros((len(ids), lengths.max()), np.int64)
    for r, x in enumerate(ids):
        batch[r, : len(x)] = x
    g = GpuBert(cpu_fast.model_dir, device=mx.cpu, dtype="float32")
    assert _cos(g.embed_batch(batch, lengths), cpu_fast._fast.embed_batch(batch, lengths)).min() >= 0.999


# -- quantized checkpoints --------------------------------------------------------------------------
def test_quantized_model_is_dequantized_once_on_the_cpu(quantized_dir, cpu_fast):
    q = MLXEmbedder(str(quantized_dir), device="cpu")
    assert q.forward == "fast_bert"  # BLAS GEMMs, not MLX's CPU quantized matmul
    ly = q._fast.layers[0]
    assert all(ly[k].dtype == mx.float32 for k in ("qkv_w", "o_w", "i_w", "f_w"))
    assert ly["i_w"].shape == (cpu_fast.dim, 4 * cpu_fast.dim)
    deq = q.embed(TEXTS)
    kept = GpuBert(quantized_dir, device=mx.cpu, dtype="float32", keep_quantized=True)
    assert kept.layers[0]["i"].quantized is not None
    ids = q.tokenize(TEXTS)
    lengths = np.array([len(x) for x in ids])
    batch = np.zeros((len(ids), lengths.max()), np.int64)
    for r, x in enumerate(ids):
        batch[r, : len(x)] = x
    assert _cos(deq, kept.embed_batch(batch, lengths)).min() >= 0.999  # same weights, two matmuls
    assert _cos(deq, cpu_fast.embed(TEXTS)).min() >= 0.99  # 8-bit stays close to fp32
    assert q.model_id != cpu_fast.model_id


def test_reference_backend_dequantizes_a_quantized_model_on_the_cpu(quantized_dir):
    ref = MLXEmbedder(str(quantized_dir), backend="reference", device="cpu")
    assert ref.forward.startswith("reference, ") and "dequantized" in ref.forward
    fast = MLXEmbedder(str(quantized_dir), device="cpu")
    assert _cos(ref.embed(TEXTS), fast.embed(TEXTS)).min() >= 0.999
