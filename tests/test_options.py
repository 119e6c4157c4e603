"""Options refused in one line before any model is read or file written: values out of range, names that point at
nothing, empty values, options that would be silently ignored (cli.parse_args, the one place), --mask and --memory
items; and the options that fit still run. One rule for a refusal: conftest.refused."""

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import BUNDLED, EXAMPLES, call, fixed, huggy_obs, refused, run

# --- values out of range, names that point at nothing -------------------------------------------------------


@pytest.mark.parametrize(
    "args,words",
    [
        (["--obs", "1,2,3"], "expected 59 numbers"),
        (["--obs", "nan"], "holds nan, inf"),
        (["--obs", "inf"], "holds nan, inf"),
        (["--obs", "dog"], "not a number"),
        (["--device", "npu:0"], "torch_npu is not installed"),
        (["--device", "cuda:3"], "no CUDA GPU"),
        (["--device", "gpu"], "expected auto, cpu"),
        (["--batch", "0"], "at least 1"),
        (["--runs", "-5"], "at least 1"),
        (["--steps", "-1"], "at least 1"),
        (["--seed", "-3"], "between 0"),
        (["--tol", "nan"], "positive"),
        (["--dtype", "int8"], "invalid choice"),
        (["--expect-sha256", "xyz"], "64 hexadecimal"),
        (["--engine", "onnxruntime", "--dtype", "float16"], "float32 only"),
    ],
)
def test_bad_arguments_refused_in_process(capsys, args, words):
    refused(call(capsys, "--mode", "action", "--model-dir", BUNDLED, *args), words)


def test_batch_too_large_refused_before_allocating(capsys):
    refused(call(capsys, "--mode", "batch", "--batch", str(10**12), "--model-dir", BUNDLED), "GiB", "would need")


def test_missing_model_and_empty_folder(capsys, tmp_path):
    refused(run(capsys, "--mode", "info", "--checkpoint", tmp_path / "nope.pt"), "no such file")
    refused(run(capsys, "--mode", "info", "--model-dir", tmp_path / "nowhere"), "no such folder")
    refused(run(capsys, "--mode", "info", "--model-dir", tmp_path), "no ML-Agents checkpoint found")
    refused(run(capsys, "--mode", "info", "--checkpoint", tmp_path), "is a folder")


def test_a_behaviour_folder_loads_its_newest_checkpoint_as_the_run_folder_does(capsys):
    """examples/vector/Vector holds Vector-50000.pt, Vector-100000.pt and Vector-50000.onnx: --model-dir of it is
    the run folder's newest checkpoint, never the older ONNX beside it."""
    obs = ["--obs", ",".join(["0.3"] * 8)]
    code, by_run, err = call(capsys, "--mode", "action", "--model-dir", EXAMPLES / "vector", *obs)
    assert code == 0, err
    code, by_behaviour, err = call(capsys, "--mode", "action", "--model-dir", EXAMPLES / "vector" / "Vector", *obs)
    assert code == 0, err
    assert by_behaviour == by_run
    code, out, err = run(capsys, "--mode", "info", "--model-dir", EXAMPLES / "vector" / "Vector")
    assert code == 0 and "Vector-100000.pt" in err + out, err


def test_a_behaviour_folder_whose_checkpoints_are_not_its_own_is_refused(capsys, tmp_path):
    (tmp_path / "Dog").mkdir()
    shutil.copy(EXAMPLES / "vector" / "Vector" / "Vector-50000.pt", tmp_path / "Dog" / "Cat-5.pt")
    shutil.copy(EXAMPLES / "vector" / "Vector" / "Vector-50000.onnx", tmp_path / "Dog" / "Cat-5.onnx")
    refused(run(capsys, "--mode", "info", "--model-dir", tmp_path / "Dog"), "holds Cat-5.pt", "--checkpoint")


@pytest.mark.parametrize("name, words", [("Vector.onnx", "--onnx"), ("Vector/Vector-50000.pt", "--checkpoint")])
def test_a_file_given_to_model_dir_is_named_a_file(capsys, name, words):
    refused(run(capsys, "--mode", "info", "--model-dir", EXAMPLES / "vector" / name), "is a file", words)


# --- empty values -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--model", "--model-dir", "--checkpoint"])
@pytest.mark.parametrize("value", ["", "  "])
def test_empty_model_options_refused(capsys, option, value):
    code, out, err = run(capsys, "--mode", "info", f"{option}={value}")
    refused((code, out, err), option, "empty value")
    assert "bundled sample" not in out


def test_empty_huggy_model_dir_counts_as_unset(capsys, monkeypatch):
    monkeypatch.setenv("HUGGY_MODEL_DIR", "")
    code, out, err = run(capsys, "--mode", "info", "--json")
    assert code == 0 and json.loads(out)["source"] == "bundled sample", err


# --- options that would be ignored --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch", "10", "--ray", "local"], "--ray applies only with --obs-file; it would be ignored"),
        (["--obs-file", "x.parquet", "--ray", ""], "--ray: empty value"),
        (["--obs-file", "x.parquet", "--ray", " "], "--ray: empty value"),
        (["--ray-actors", "3"], "--ray-actors applies only with --ray; it would be ignored"),
        (["--obs-file", "x.parquet", "--ray-actors", "3"], "--ray-actors applies only with --ray"),
        (["--keep-columns", "id", "--output", "out.npz"], "--keep-columns applies only with --obs-file"),
        (["--chunk", "100"], "--chunk applies only with --obs-file"),
        (["--progress"], "--progress applies only with --obs-file"),
        (["--obs-file", "x.npy", "--batch", "5"], "--batch does not apply with --obs-file; it would be ignored"),
        # given at its default value, an option is given all the same (it was taken as not given)
        (["--ray-actors", "2"], "--ray-actors applies only with --ray; it would be ignored"),
        (["--chunk", "16384"], "--chunk applies only with --obs-file"),
        (["--samples", "100"], "--samples applies to --mode precision, not batch"),
    ],
)
def test_options_that_would_be_ignored_are_refused(capsys, tmp_path, monkeypatch, args, message):
    """Each ran before, its option dropped: --batch 10 --ray local without Ray, --ray '' without Ray,
    --ray-actors and --keep-columns without effect. Refused before any model is read or file is written."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "--mode", "batch", *args, "--model-dir", BUNDLED)
    assert refused((code, out, err)).startswith(f"error: {message}") and out == "", (out, err)
    assert list(tmp_path.iterdir()) == []


def test_an_option_with_a_mode_dependent_default_given_to_another_mode_is_refused(capsys):
    """--batch and --steps have per-mode defaults; given to a mode that takes neither they were dropped."""
    for args, message in (
        (
            ["--mode", "action", "--batch", "5"],
            "--batch applies to --mode batch / onnx-compare / benchmark, not action",
        ),
        (["--mode", "info", "--steps", "9"], "--steps applies to --mode fingerprint / stats / onnx-compare, not info"),
    ):
        assert refused(run(capsys, *args, "--model-dir", BUNDLED)) == f"error: {message}"


def test_options_that_fit_still_run(capsys, tmp_path):
    np.save(tmp_path / "obs.npy", np.zeros((5, 59), np.float32))
    code, out, err = run(
        capsys,
        "--mode",
        "batch",
        "--obs-file",
        tmp_path / "obs.npy",
        "--chunk",
        "2",
        "--progress",
        "--model-dir",
        BUNDLED,
        "--json",
    )
    assert code == 0 and json.loads(out)["rows"] == 5, err
    code, out, err = run(capsys, "--mode", "batch", "--batch", "3", "--model-dir", BUNDLED, "--json")
    assert code == 0 and json.loads(out)["rows"] == 3, err


# --- --mask and --memory ------------------------------------------------------------------------------------


def test_empty_items_in_mask_and_memory_are_refused(capsys):
    lstm = EXAMPLES / "lstm"  # discrete [4], memory 32
    zeros = ",".join(["0"] * 32)
    refused(run(capsys, "--mode", "action", "--model-dir", lstm, "--mask", "1,,1,1,1"), "--mask", "empty item")
    refused(
        run(capsys, "--mode", "action", "--model-dir", lstm, "--memory", "0,," + zeros[4:]), "--memory", "empty item"
    )
    for args in (("--mask", "1,0,1,1,"), ("--memory", zeros + ","), ("--mask", "1,0,1,1")):  # one trailing comma: fine
        code, _, err = run(capsys, "--mode", "action", "--model-dir", lstm, *args)
        assert code == 0, (args, err)


def test_mask_applies_to_every_row_of_an_obs_file(capsys, tmp_path):
    import onnxruntime as ort

    obs = (np.random.RandomState(2).randn(200, 12) * 2).astype(np.float32)
    pq.write_table(pa.table({"obs": fixed(obs)}), tmp_path / "obs.parquet")
    np.savez(tmp_path / "obs.npz", obs=obs)
    session = ort.InferenceSession(str(EXAMPLES / "hybrid" / "Hybrid.onnx"), providers=["CPUExecutionProvider"])
    free = session.run(
        ["deterministic_discrete_actions"], {"obs_0": obs, "action_masks": np.ones((200, 2), np.float32)}
    )[0]
    assert (free == 1).any()  # the mask below changes rows
    for source in ("obs.parquet", "obs.npz"):
        target = tmp_path / f"out-{source}.npz"
        code, _, err = run(
            capsys,
            "--mode",
            "batch",
            "--obs-file",
            tmp_path / source,
            "--output",
            target,
            "--mask",
            "1,0",
            "--model-dir",
            EXAMPLES / "hybrid",
        )
        assert code == 0, err
        assert (np.load(target)["discrete_actions"] == 0).all(), source
    masks = np.ones((200, 2), np.int64)
    pq.write_table(pa.table({"obs": fixed(obs), "action_masks": fixed(masks, None)}), tmp_path / "held.parquet")
    np.savez(tmp_path / "held.npz", obs=obs, action_masks=masks)
    for source in ("held.parquet", "held.npz"):
        refused(
            run(
                capsys,
                "--mode",
                "batch",
                "--obs-file",
                tmp_path / source,
                "--mask",
                "1,0",
                "--model-dir",
                EXAMPLES / "hybrid",
            ),
            "--mask",
            "action_masks",
        )
    np.save(tmp_path / "huggy.npy", huggy_obs(10))
    refused(
        run(capsys, "--mode", "batch", "--obs-file", tmp_path / "huggy.npy", "--mask", "1,0", "--model-dir", BUNDLED),
        "--mask",
        "no discrete actions",
    )


@pytest.mark.parametrize("name", ["attention", "vector"])
def test_the_largest_seed_runs(capsys, name):
    """--seed takes up to 2**32 - 1 (numpy's RandomState): an entity buffer's row counts, drawn from seed + 104729,
    wrap around instead of failing for the seeds at the top of the range."""
    code, out, err = call(capsys, "--mode", "action", "--model-dir", EXAMPLES / name, "--seed", str(2**32 - 1))
    assert code == 0 and out["passed"], err
