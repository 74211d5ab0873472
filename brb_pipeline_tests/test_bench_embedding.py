"""The embedding benchmark's refusal to compare against a peer far below its own GEMM bound, and
its record of the peer's pinned versions (pure functions; nothing is timed)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_embedding as be  # noqa: E402


def test_ratio_given_when_the_peer_runs_near_its_bound():
    v = be.peer_ratio(30.0, 20.0, 40.0)
    assert v == {"ratio": 1.5, "peer_share_of_bound": 0.5, "refused": None}


def test_ratio_refused_when_the_peer_runs_far_below_its_bound():
    v = be.peer_ratio(22.6, 3.8, 28.7)  # the run of the issue: torch GEMM fine, the peer 13% of it
    assert v["ratio"] is None and v["peer_share_of_bound"] == pytest.approx(3.8 / 28.7)
    assert "13% of its own GEMM bound" in v["refused"] and "under 25%" in v["refused"]


def test_the_threshold_is_the_boundary_and_a_missing_bound_refuses():
    assert be.peer_ratio(10.0, 25.0, 100.0)["ratio"] == pytest.approx(0.4)  # exactly 25%: compared
    assert be.peer_ratio(10.0, 24.9, 100.0)["ratio"] is None
    assert be.peer_ratio(10.0, 5.0, 0.0)["refused"] == "the peer's GEMM bound was not measured"


def test_layer_shapes_carry_the_model_flops_per_token():
    cfg = {"hidden_size": 384, "intermediate_size": 1536}
    shapes = be.layer_gemm_shapes(cfg, tokens=10)
    assert sum(2 * m * k * n for m, k, n in shapes) == 10 * 2 * (4 * 384 * 384 + 2 * 384 * 1536)


def test_peer_versions_read_every_pin(tmp_path, monkeypatch):
    pins = tmp_path / "pins.txt"
    pins.write_text("# comment\nnumpy==0.0.1\nno-such-package-here==1.0  # trailing\n")
    monkeypatch.setattr(be, "PEER_PINS", pins)
    got = be.peer_versions()
    assert set(got) == {"numpy", "no-such-package-here"}
    assert got["numpy"]["installed"] and not got["numpy"]["matches"]
    assert got["no-such-package-here"] == {"installed": None, "pinned": "1.0", "matches": False}


def test_the_shipped_pins_pin_torch_and_the_peer_exactly():
    got = be.peer_versions()
    assert got["torch"]["pinned"] == "2.13.0" and "sentence-transformers" in got and "transformers" in got
    assert all(v["pinned"][0].isdigit() for v in got.values())
