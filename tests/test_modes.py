"""batch, precision, onnx-compare, export-onnx, fingerprint, stats, checkpoints."""

import json
import os
import shutil

import numpy as np
import onnx
import pytest
from conftest import AGENT, BUNDLED, BUNDLED_ONNX, BUNDLED_PT, call, cli, ort_deterministic

import inference as I
from mlagents_inference.core.sources import DEFAULT_EXPORT, HERE
from mlagents_inference.fronts.cli import parse_args


def rs_obs(seed: int, rows: int) -> np.ndarray:
    """The seed's observation convention, stated independently: RandomState(seed).randn(rows, 59)."""
    return np.random.RandomState(seed).randn(rows, 59).astype(np.float32)


def test_checkpoints_lists_steps_and_rewards(capsys):
    code, out, _ = call(capsys, "--mode", "checkpoints", "--model-dir", AGENT)
    assert code == 0 and out["default"] == "Vector-100000.pt"
    assert out["checkpoints"] == [
        {"file": "Vector-50000.pt", "steps": 50000, "reward": 0.5},
        {"file": "Vector-100000.pt", "steps": 100000, "reward": 0.5},
    ]


def test_batch_rows_equal_single_observations(capsys):
    code, out, _ = call(capsys, "--mode", "batch", "--batch", "16", "--seed", "3", "--model-dir", BUNDLED)
    assert code == 0 and out["batch"] == 16 and len(out["actions"]) == 16
    assert out["cold_ms"] > 0 and out["warm_ms"] > 0 and out["warm_calls"] >= 3  # measured, not how fast
    code, single, _ = call(capsys, "--mode", "action", "--seed", "3", "--model-dir", BUNDLED)
    # a batched kernel may round differently from a single-row one (torch: ~1e-6 here): 1e-5, as against the ONNX
    assert np.abs(np.array(out["actions"][0]) - np.array(single["actions"])).max() <= 1e-5
    reference = ort_deterministic(BUNDLED_ONNX, rs_obs(3, 16))
    assert np.abs(np.array(out["actions"]) - reference).max() <= 1e-5


def test_precision_float32_measures_its_error(capsys):
    """float32 against float64: small. Its exact size (zero included) is the CPU's rounding, so
    only the bound is asserted."""
    code, out, _ = call(capsys, "--mode", "precision", "--samples", "50", "--model-dir", BUNDLED)
    assert code == 0 and out["passed"] is True and out["reference"] == "float64 cpu"
    assert 0 <= out["max_abs_err"] < 1e-4 and 0 <= out["max_rel_err"]
    assert out["cos"] >= 0.999999 and 0 <= out["bitwise_equal_ratio"] <= 1
    assert set(out) >= {"reference", "cos", "max_abs_err", "max_rel_err", "bitwise_equal_ratio", "passed"}


def test_precision_can_fail(capsys):
    code, out, _ = call(capsys, "--mode", "precision", "--samples", "20", "--tol", "1e-9", "--model-dir", BUNDLED)
    assert code == 1 and out["passed"] is False


def test_precision_low_precision_has_larger_error(capsys):
    _, f32, _ = call(capsys, "--mode", "precision", "--samples", "30", "--model-dir", BUNDLED)
    code, bf16, _ = call(
        capsys, "--mode", "precision", "--samples", "30", "--dtype", "bfloat16", "--model-dir", BUNDLED
    )
    assert code in (0, 1) and bf16["engine"] == "torch"
    # bfloat16 keeps 8 bits of each weight: an error of order 1e-3..1e-2 whatever the CPU, far
    # above float32's (which may be anything from 0 to ~1e-6 depending on the CPU's rounding)
    assert f32["max_abs_err"] < 1e-4 < bf16["max_abs_err"]
    assert bf16["passed"] == (bf16["cos"] >= 0.999 and bf16["max_abs_err"] < 0.01) == (code == 0)


@pytest.mark.parametrize("engine", ["onnxruntime", "torch"])
def test_onnx_compare_passes_matching_pair(capsys, engine):
    code, out, _ = call(capsys, "--mode", "onnx-compare", "--seed", "7", "--engine", engine, "--model-dir", BUNDLED)
    assert code == 0 and out["passed"] is True and out["max_abs_err"] < 1e-5 and out["cos"] >= 0.999999
    assert out["reference"].endswith("Huggy-600017.onnx")


def test_onnx_compare_no_normalizer_within_float32_rounding(capsys):
    code, out, _ = call(capsys, "--mode", "onnx-compare", "--model-dir", AGENT)
    assert code == 0 and 0 <= out["max_abs_err"] <= 2e-6  # bit-equal on some CPUs, a few ulps on others


def test_onnx_compare_fails_on_another_policys_onnx(capsys):
    code, out, _ = call(
        capsys,
        "--mode",
        "onnx-compare",
        "--checkpoint",
        AGENT / "Vector" / "Vector-50000.pt",
        "--onnx",
        AGENT / "Vector.onnx",
    )  # the same run's later checkpoint
    assert code == 1 and out["passed"] is False and out["max_abs_err"] > 1e-4
    code, out, _ = call(capsys, "--mode", "onnx-compare", "--checkpoint", BUNDLED_PT, "--onnx", AGENT / "Vector.onnx")
    assert code == 1 and out["passed"] is False


def test_onnx_compare_refuses_intermediate_checkpoint_without_its_onnx(capsys, tmp_path):
    (tmp_path / "Vector").mkdir()
    (tmp_path / "run_logs").mkdir()
    shutil.copy(AGENT / "Vector.onnx", tmp_path)
    shutil.copy(AGENT / "run_logs" / "training_status.json", tmp_path / "run_logs")
    for name in ("Vector-50000.pt", "Vector-100000.pt"):  # without Vector-50000.onnx
        os.symlink(AGENT / "Vector" / name, tmp_path / "Vector" / name)
    code, out, err = call(capsys, "--mode", "onnx-compare", "--checkpoint", tmp_path / "Vector" / "Vector-50000.pt")
    assert code == 2 and "no ONNX belongs to this checkpoint" in err
    code, out, _ = call(capsys, "--mode", "onnx-compare", "--checkpoint", tmp_path / "Vector" / "Vector-100000.pt")
    assert code == 0 and out["reference"].endswith("Vector.onnx")  # the final checkpoint owns the top-level ONNX


def exported_outputs(path, obs):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return names, dict(zip(names, session.run(None, {"obs_0": obs.astype(np.float32)})))


@pytest.mark.parametrize(
    "where,pt,onnx_file,limit",
    [
        ("agent", "Vector/Vector-100000.pt", "Vector.onnx", 2e-6),
        ("agent", "Vector/Vector-50000.pt", "Vector/Vector-50000.onnx", 2e-6),
        ("bundled", "Huggy/Huggy-600017.pt", "Huggy/Huggy-600017.onnx", 2e-6),
    ],
)
def test_export_round_trip(capsys, tmp_path, where, pt, onnx_file, limit):
    """The export has ML-Agents' interface and computes what ML-Agents' own ONNX computes, to
    float32 rounding. Whether it is bit-identical depends on the CPU's kernels (it is here, on
    the machine these tests were written on), so only the bound is asserted, and that the
    bit_identical flag agrees with the error it reports."""
    base = AGENT if where == "agent" else BUNDLED
    out_path = tmp_path / "rebuilt.onnx"
    code, out, _ = call(capsys, "--mode", "export-onnx", "--checkpoint", base / pt, "--output", out_path)
    assert code == 0 and out["path"] == str(out_path.resolve()) and 0 <= out["max_abs_err_vs_reference"] <= limit
    assert isinstance(out["bit_identical"], bool)
    assert out["bit_identical"] == (out["max_abs_err_vs_reference"] == 0.0)
    model = onnx.load(str(out_path))
    onnx.checker.check_model(model)
    reference = onnx.load(str(base / onnx_file))
    assert [i.name for i in model.graph.input] == [i.name for i in reference.graph.input] == ["obs_0"]
    assert [o.name for o in model.graph.output] == [o.name for o in reference.graph.output]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # dynamic batch
    info = I.load(base / pt, engine="torch").info
    obs_dim, act_dim = info["inputs"][0]["shape"][0], info["continuous_size"]
    obs = np.random.RandomState(11).randn(300, obs_dim)
    names, got = exported_outputs(out_path, obs)
    _, want = exported_outputs(base / onnx_file, obs)
    assert names == [
        "version_number",
        "memory_size",
        "continuous_actions",
        "continuous_action_output_shape",
        "deterministic_continuous_actions",
    ]
    assert np.abs(got["deterministic_continuous_actions"] - want["deterministic_continuous_actions"]).max() <= limit
    assert got["version_number"].tolist() == [3.0] and got["memory_size"].tolist() == [0.0]
    assert got["continuous_action_output_shape"].tolist() == [float(act_dim)]
    stochastic = got["continuous_actions"]
    assert stochastic.shape == (300, act_dim) and np.abs(stochastic).max() <= 1.0
    assert not np.allclose(stochastic, got["deterministic_continuous_actions"])


def test_export_default_path_and_human_output(capsys, tmp_path):
    assert I.main(["--mode", "export-onnx", "--model-dir", str(BUNDLED), "--output", str(tmp_path / "h.onnx")]) == 0
    stdout = capsys.readouterr().out
    assert stdout.strip().splitlines()[-1] == "SUCCESS"
    assert "max_abs_err" in stdout and f"written: {(tmp_path / 'h.onnx').resolve()}" in stdout
    assert (tmp_path / "h.onnx").is_file()
    args = parse_args(["--mode", "export-onnx"])
    assert args.output is None and DEFAULT_EXPORT == HERE / "assets" / "huggy_rebuilt.onnx"


def test_fingerprint_reproducible_across_processes(capsys):
    """A fresh process and this one (after every other test ran in it) give the same sequence."""
    fresh = cli("--mode", "fingerprint", "--seed", "7", "--steps", "16", "--model-dir", BUNDLED, "--json")
    assert fresh.returncode == 0, fresh.stderr
    runs = [json.loads(fresh.stdout)] + [
        call(capsys, "--mode", "fingerprint", "--seed", s, "--steps", "16", "--model-dir", BUNDLED)[1]
        for s in ("7", "8")
    ]
    assert runs[0]["identical"] and runs[0]["steps"] == 16 and len(runs[0]["sha256"]) == 64
    assert runs[0]["sha256"] == runs[1]["sha256"] != runs[2]["sha256"]
    assert runs[0]["first_action"] == runs[1]["first_action"]


def test_fingerprint_first_action_is_sample_and_hash_is_of_the_actions(capsys):
    code, fp, _ = call(capsys, "--mode", "fingerprint", "--seed", "0", "--steps", "8", "--model-dir", BUNDLED)
    _, sample, _ = call(capsys, "--mode", "sample", "--seed", "0", "--model-dir", BUNDLED)
    assert code == 0 and fp["first_action"] == sample["sampled"]
    _, det, _ = call(
        capsys, "--mode", "fingerprint", "--seed", "0", "--steps", "8", "--deterministic", "--model-dir", BUNDLED
    )
    reference = ort_deterministic(BUNDLED_ONNX, rs_obs(0, 8))
    assert np.abs(np.array(det["first_action"]) - reference[0]).max() <= 1e-5
    assert det["sha256"] != fp["sha256"]


def test_stats_rollouts(capsys):
    code, out, _ = call(capsys, "--mode", "stats", "--rollouts", "3", "--steps", "20", "--model-dir", BUNDLED)
    assert code == 0 and out["all_in_range"] is True and len(out["rollouts"]) == 3
    for row in out["rollouts"]:
        assert row["steps"] == 20 and 0 < row["mean_abs_action"] <= row["max_abs_action"] <= 1.0
        assert row["mean_step_ms"] >= 0
    assert "synthetic" in out["dynamics"]
