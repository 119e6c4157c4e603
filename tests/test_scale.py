"""benchmark output, engines, dataset-sized batches from files; the peak memory a batch reports is its own."""

import importlib.util
import json

import numpy as np
import pytest
from conftest import BUNDLED, BUNDLED_ONNX, EXAMPLES, call, cli, ort_deterministic

from mlagents_inference.core.sources import HERE
from mlagents_inference.engines.factory import choose_engine

BENCH_FIELDS = (
    "runs",
    "warmup",
    "batch",
    "avg_ms",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "throughput_per_s",
    "engine",
    "onnxruntime_p50_ms",
    "ratio_to_onnxruntime",
)


@pytest.mark.parametrize("engine,batch", [("auto", 1), ("torch", 8)])
def test_benchmark_reports_side_by_side(capsys, engine, batch):
    code, out, _ = call(
        capsys, "--mode", "benchmark", "--runs", "40", "--batch", batch, "--engine", engine, "--model-dir", BUNDLED
    )
    assert code == 0
    for key in BENCH_FIELDS:
        assert out[key] is not None, key
    assert out["warmup"] == 20 and out["runs"] == 40 and out["batch"] == batch
    assert 0 < out["p50_ms"] <= out["p95_ms"] <= out["p99_ms"] <= out["max_ms"]
    assert out["engine"] == ("onnxruntime" if engine == "auto" else "torch")
    assert out["ratio_to_onnxruntime"] == pytest.approx(out["p50_ms"] / out["onnxruntime_p50_ms"])
    assert out["throughput_per_s"] == pytest.approx(batch / (out["avg_ms"] / 1e3))


def test_benchmark_without_an_onnx_runs_the_bare_session_on_mlagents_export(capsys, tmp_path):
    """No ML-Agents ONNX beside the checkpoint: the bare contender runs ML-Agents' export of it,
    fed and fetched as a deterministic step (an LSTM policy with masks: every kind of input)."""
    import shutil

    source = EXAMPLES / "lstm" / "Memory" / "Memory-100000.pt"
    (tmp_path / "Memory").mkdir()
    shutil.copy(source, tmp_path / "Memory" / source.name)
    code, out, err = call(capsys, "--mode", "benchmark", "--runs", "20", "--model-dir", tmp_path)
    assert code == 0, err
    assert out["onnxruntime_model"] == "export of this checkpoint" and out["onnxruntime_p50_ms"] > 0


def test_benchmark_plot(capsys, tmp_path):
    target = tmp_path / "lat.png"
    code, out, err = call(capsys, "--mode", "benchmark", "--runs", "20", "--plot", target, "--model-dir", BUNDLED)
    if importlib.util.find_spec("matplotlib") is None:
        assert code == 2 and "needs matplotlib" in err and not target.exists()
    else:
        assert code == 0 and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_engine_auto_is_onnxruntime_on_cpu_and_lazy_imports():
    """Imports stay lazy: loading the program pulls in neither onnx, onnxruntime, huggingface_hub
    nor matplotlib (torch it does: the policy's modules are torch modules). A fresh interpreter:
    this one has imported them all."""
    import torch

    cpu = torch.device("cpu")
    assert choose_engine("auto", cpu, "float32") == "onnxruntime"
    assert choose_engine("auto", cpu, "bfloat16") == choose_engine("torch", cpu, "float32") == "torch"
    code = (
        "import sys; sys.path.insert(0, %r); import inference; "
        "print(sorted(m for m in ('onnx', 'onnxruntime', 'huggingface_hub', 'matplotlib', 'yaml', 'PIL') "
        "if m in sys.modules))" % str(HERE)
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture()
def obs_file(tmp_path):
    obs = np.random.RandomState(5).randn(2500, 59).astype(np.float32) * 2
    path = tmp_path / "obs.npy"
    np.save(path, obs)
    return path, obs


@pytest.mark.parametrize("engine", ["onnxruntime", "torch"])
def test_file_batch_matches_onnx_across_chunks(capsys, tmp_path, obs_file, engine):
    path, obs = obs_file
    target = tmp_path / "actions.npy"
    code, out, _ = call(
        capsys,
        "--mode",
        "batch",
        "--obs-file",
        path,
        "--output",
        target,
        "--chunk",
        "333",
        "--engine",
        engine,
        "--model-dir",
        BUNDLED,
    )
    assert code == 0 and out["rows"] == 2500 and out["chunk"] == 333
    actions = np.load(target)
    assert actions.shape == (2500, 21) and actions.dtype == np.float32
    assert np.abs(actions - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


@pytest.mark.parametrize("suffix", [".npz", ".csv"])
def test_file_batch_other_formats(capsys, tmp_path, suffix):
    obs = np.random.RandomState(6).randn(40, 59).astype(np.float32)
    path = tmp_path / f"obs{suffix}"
    if suffix == ".npz":
        np.savez(path, obs=obs)
    else:
        np.savetxt(path, obs, delimiter=",", fmt="%.9g")
    target = tmp_path / "a.npy"
    code, out, _ = call(capsys, "--mode", "batch", "--obs-file", path, "--output", target, "--model-dir", BUNDLED)
    assert code == 0 and np.abs(np.load(target) - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5


def test_million_rows_in_bounded_memory(tmp_path):
    """1,000,000 Huggy observations (236 MB) through a real process: its peak RSS grows by less than
    450 MB over a 20,000-row run in the same environment (the memory-mapped input and output pages,
    320 MB, count in RSS; loading the input whole as float64 would add 470 MB more), and the actions
    equal ML-Agents' ONNX. The baseline run makes the bound hold whatever torch build (a CUDA build
    maps far more libraries) or CPU. (Speed is measured by the benchmark, not asserted here.)"""
    rows = 1_000_000
    path = tmp_path / "big.npy"
    big = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, 59))
    for start in range(0, rows, 100_000):
        big[start : start + 100_000] = np.random.RandomState(start).randn(100_000, 59)
    big.flush()
    del big
    target = tmp_path / "out.npy"
    result = cli(
        "--mode", "batch", "--obs-file", path, "--output", target, "--model-dir", BUNDLED, "--json", timeout=600
    )
    assert result.returncode == 0, result.stderr
    import json

    out = json.loads(result.stdout)
    small = tmp_path / "small.npy"
    np.save(small, np.random.RandomState(1).randn(20_000, 59).astype(np.float32))
    baseline = cli(
        "--mode",
        "batch",
        "--obs-file",
        small,
        "--output",
        tmp_path / "small_out.npy",
        "--model-dir",
        BUNDLED,
        "--json",
        timeout=600,
    )
    assert baseline.returncode == 0, baseline.stderr
    assert out["rows"] == rows and out["peak_rss_mb"] - json.loads(baseline.stdout)["peak_rss_mb"] < 450
    actions = np.load(target, mmap_mode="r")
    source = np.load(path, mmap_mode="r")
    for start in (0, 123_456, rows - 1000):
        want = ort_deterministic(BUNDLED_ONNX, np.asarray(source[start : start + 1000]))
        assert np.abs(actions[start : start + 1000] - want).max() <= 1e-5


def test_in_memory_batch_output(capsys, tmp_path):
    target = tmp_path / "actions.npy"
    code, out, _ = call(
        capsys, "--mode", "batch", "--batch", "20", "--seed", "2", "--output", target, "--model-dir", BUNDLED
    )
    assert code == 0 and out["output"] == str(target)
    saved = np.load(target)
    assert saved.shape == (20, 21) and np.array_equal(saved, np.array(out["actions"], np.float32))
    obs = (
        np.random.RandomState(2).randn(20, 59).astype(np.float32)
    )  # the original NPU adaptation's convention: RandomState(seed)
    assert np.abs(saved - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["actions.npy"]


@pytest.mark.parametrize(
    "args,words",
    [
        (["--mode", "action", "--output", "x.npy"], "--output applies to --mode batch / export-onnx"),
        (["--mode", "info", "--obs-file", "x.npy"], "--obs-file applies to --mode batch"),
        (["--mode", "action", "--plot", "x.png"], "--plot applies to --mode benchmark"),
        (["--mode", "sample", "--runs", "5"], "--runs applies to --mode benchmark"),
        (["--mode", "action", "--stream-stats"], "--stream-stats applies to --mode stream"),
        (["--mode", "stream", "--json"], "--json does not apply to stream mode"),
        (["--mode", "sample", "--onnx", "x.onnx"], "--onnx x.onnx: no such file"),  # --onnx applies to every mode now
    ],
)
def test_options_for_other_modes_refused(capsys, args, words):
    code, _, err = call(capsys, *args, "--model-dir", BUNDLED)
    assert code == 2 and words in err


def test_peak_rss_is_this_programs_own_not_its_parents(tmp_path):
    """Linux carries ru_maxrss across exec: started from a process holding 2 GB, the program reported
    a peak of 2 GB or more. VmHWM counts this program's own pages only."""
    np.save(tmp_path / "obs.npy", np.zeros((100, 59), np.float32))
    ballast = np.ones(2 << 27)  # 2 GiB of float64, resident in this (the parent) process
    result = cli("--mode", "batch", "--obs-file", tmp_path / "obs.npy", "--model-dir", BUNDLED, "--json")
    assert ballast[-1] == 1.0
    assert result.returncode == 0, result.stderr
    peak = json.loads(result.stdout)["peak_rss_mb"]
    assert 20 < peak < 1500, peak  # the program alone: a few hundred MB (torch, onnxruntime)
