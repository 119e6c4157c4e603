"""hostile and broken input is refused cleanly: exit 2, 1-3 lines on stderr, no
traceback, no code run, no output file created or changed; fuzzed loaders and parsers.
Refusals run main() in this process; one runs as a user runs it, in a fresh process, where
anything a C library prints to the real stderr would show."""
import errno
import os
import re
import socket
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import BUNDLED, BUNDLED_ONNX, BUNDLED_PT, call, cli, ort_deterministic
from hypothesis import example, given, settings
from hypothesis import strategies as st

import inference as I
from mlagents_inference.core.inputs import parse_obs
from mlagents_inference.core.sources import file_sha256


class RunsCode:
    """A pickle that would create a file when unpickled without weights_only."""
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


NORMALIZER = "network_body.observation_encoder.processors.0.normalizer."


@pytest.fixture(scope="module")
def policy_state():
    return torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)["Policy"]


def refused(result, *words):
    """exit 2, one to three lines on stderr, no traceback, the words named. `result` is a
    finished process or (exit code, stderr) from run()."""
    code, stderr = (result.returncode, result.stderr) if hasattr(result, "returncode") else result
    lines = stderr.strip().splitlines()
    assert code == 2, (code, stderr)
    assert 1 <= len(lines) <= 3 and "Traceback" not in stderr, stderr
    for word in words:
        assert word in stderr, (word, stderr)


@pytest.fixture()
def run(capsys):
    """main() in this process, as typed on the command line: (exit code, stderr)."""
    def run_main(*args):
        code = I.main([str(a) for a in args])
        return code, capsys.readouterr().err
    return run_main


def test_pickle_that_runs_code_is_refused_and_never_runs(tmp_path, run):
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt"
    torch.save({"Policy": RunsCode(marker)}, evil)
    refused(run("--mode", "action", "--checkpoint", evil), "evil.pt", "could run code")
    assert not marker.exists()
    torch.save(RunsCode(marker), tmp_path / "evil2.pt")  # code at the top level of the pickle
    refused(run("--mode", "info", "--checkpoint", tmp_path / "evil2.pt"), "refused")
    assert not marker.exists()


def broken_files(tmp_path, policy_state):
    whole = BUNDLED_PT.read_bytes()
    (tmp_path / "truncated.pt").write_bytes(whole[: len(whole) // 3])
    (tmp_path / "random.pt").write_bytes(np.random.RandomState(0).bytes(4096))
    (tmp_path / "empty.pt").write_bytes(b"")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "not_mlagents.pt")
    torch.save([1, 2, 3], tmp_path / "a_list.pt")
    chain = dict(policy_state)
    chain["network_body._body_endoder.seq_layers.2.weight"] = torch.zeros(512, 100)
    torch.save({"Policy": chain}, tmp_path / "no_chain.pt")
    nan = dict(policy_state)
    nan[NORMALIZER + "running_mean"] = torch.full((59,), float("nan"))
    torch.save({"Policy": nan}, tmp_path / "nan_normalizer.pt")
    inf = dict(policy_state)
    inf["action_model._continuous_distribution.mu.bias"] = torch.full((21,), float("inf"))
    torch.save({"Policy": inf}, tmp_path / "inf_mu.pt")
    return {"truncated.pt": "damaged", "random.pt": "refused", "empty.pt": "refused",
            "not_mlagents.pt": "not an ML-Agents checkpoint", "a_list.pt": "not an ML-Agents checkpoint",
            "no_chain.pt": "seq_layers.2.weight", "nan_normalizer.pt": "NaN", "inf_mu.pt": "NaN or infinite"}


def test_broken_checkpoints_refused(tmp_path, policy_state, run):
    for name, words in broken_files(tmp_path, policy_state).items():
        refused(run("--mode", "action", "--checkpoint", tmp_path / name), name, words)


def test_missing_model_and_empty_folder(tmp_path, run):
    refused(run("--mode", "info", "--checkpoint", tmp_path / "nope.pt"), "no such file")
    refused(run("--mode", "info", "--model-dir", tmp_path / "nowhere"), "no such folder")
    refused(run("--mode", "info", "--model-dir", tmp_path), "no ML-Agents checkpoint found")
    refused(run("--mode", "info", "--checkpoint", tmp_path), "is a folder")


@pytest.mark.parametrize("args,words", [
    (["--obs", "1,2,3"], "expected 59 numbers"), (["--obs", "nan"], "holds nan, inf"), (["--obs", "inf"], "holds nan, inf"),
    (["--obs", "dog"], "not a number"), (["--device", "npu:0"], "torch_npu is not installed"),
    (["--device", "cuda:3"], "no CUDA GPU"), (["--device", "gpu"], "expected auto, cpu"),
    (["--batch", "0"], "at least 1"), (["--runs", "-5"], "at least 1"), (["--steps", "-1"], "at least 1"),
    (["--seed", "-3"], "between 0"), (["--tol", "nan"], "positive"), (["--dtype", "int8"], "invalid choice"),
    (["--expect-sha256", "xyz"], "64 hexadecimal"), (["--engine", "onnxruntime", "--dtype", "float16"], "float32 only"),
])
def test_bad_arguments_refused_in_process(capsys, args, words):
    code, _, err = call(capsys, "--mode", "action", "--model-dir", BUNDLED, *args)
    assert code == 2 and words in err and 1 <= len(err.strip().splitlines()) <= 3


def test_bad_arguments_refused_as_a_user_runs_them():
    """After torch, onnxruntime and the model are loaded: nothing else reaches the real stderr."""
    refused(cli("--mode", "action", "--obs", "1,2,3", "--model-dir", BUNDLED), "expected 59 numbers")


def test_batch_too_large_refused_before_allocating(capsys):
    code, _, err = call(capsys, "--mode", "batch", "--batch", str(10**12), "--model-dir", BUNDLED)
    assert code == 2 and "GiB" in err and "would need" in err


def test_expect_sha256(capsys):
    good = file_sha256(BUNDLED_PT)
    code, out, _ = call(capsys, "--mode", "info", "--model-dir", BUNDLED, "--expect-sha256", good.upper())
    assert code == 0 and out["sha256"] == good
    code, _, err = call(capsys, "--mode", "info", "--model-dir", BUNDLED, "--expect-sha256", "0" * 64)
    assert code == 2 and good in err and "refusing" in err


# --- observation files -------------------------------------------------------------------------

def obs_file_cases(tmp_path):
    good = np.random.RandomState(0).randn(50, 59).astype(np.float32)
    np.save(tmp_path / "wide.npy", np.zeros((5, 60), np.float32))
    bad_row = good.copy()
    bad_row[37, 4] = np.nan
    np.save(tmp_path / "nan_row.npy", bad_row)
    inf_row = good.copy()
    inf_row[3, 0] = np.inf
    np.save(tmp_path / "inf_row.npy", inf_row)
    np.save(tmp_path / "strings.npy", np.array([["a"] * 59]))
    (tmp_path / "text.npy").write_text("not an array")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "bad.csv").write_text("1,2,x\n")
    np.save(tmp_path / "empty.npy", np.zeros((0, 59), np.float32))
    return {"wide.npy": "expected [rows, 59]", "nan_row.npy": "nan", "inf_row.npy": "inf",
            "strings.npy": "expected numbers", "text.npy": "not a readable array",
            "objects.npy": "not a readable array", "bad.csv": "not a readable array", "empty.npy": "no rows"}


def test_bad_obs_files_refused_without_output(capsys, tmp_path):
    for name, words in obs_file_cases(tmp_path).items():
        target = tmp_path / f"out_{name}.npy"
        code, _, err = call(capsys, "--mode", "batch", "--obs-file", tmp_path / name, "--output", target,
                            "--chunk", "16", "--model-dir", BUNDLED)
        assert code == 2 and words in err, (name, err)
        assert not target.exists(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_bad_obs_file_names_the_row_of_the_file(tmp_path, run):
    """A bad row is named by its row number in the file, wherever the chunks fall."""
    obs_file_cases(tmp_path)
    for name, row in (("nan_row.npy", 37), ("inf_row.npy", 3)):
        code, err = run("--mode", "batch", "--obs-file", tmp_path / name, "--chunk", "16", "--model-dir", BUNDLED)
        assert code == 2 and re.search(rf"\brow {row}\b", err), (name, err)


def test_failed_batch_keeps_existing_output(capsys, tmp_path):
    obs_file_cases(tmp_path)
    target = tmp_path / "precious.npy"
    target.write_bytes(b"keep me")
    code, _, err = call(capsys, "--mode", "batch", "--obs-file", tmp_path / "nan_row.npy", "--output", target,
                        "--chunk", "8", "--model-dir", BUNDLED)
    assert code == 2 and target.read_bytes() == b"keep me"


# --- outputs -------------------------------------------------------------------------------------

def test_output_paths_refused(capsys, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for target, words in ((a_file / "x.onnx", "is a file, not a folder"), (tmp_path / "no" / "x.onnx", "does not exist"),
                          (tmp_path, "expected a .onnx"), (tmp_path / "x.txt", "expected a .onnx")):
        code, _, err = call(capsys, "--mode", "export-onnx", "--model-dir", BUNDLED, "--output", target)
        assert code == 2 and words in err, (target, err)


def test_export_failing_half_way_leaves_existing_file(tmp_path, monkeypatch, run):
    target = tmp_path / "model.onnx"
    target.write_bytes(b"previous export")
    real_write_bytes = Path.write_bytes

    def half_then_fail(path, data):
        real_write_bytes(path, bytes(data)[:1000])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(Path, "write_bytes", half_then_fail)
    refused(run("--mode", "export-onnx", "--model-dir", BUNDLED, "--output", target), "model.onnx", "not written",
            os.strerror(errno.ENOSPC), "unchanged")
    monkeypatch.undo()
    assert target.read_bytes() == b"previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


# --- no network when told so ----------------------------------------------------------------------

@pytest.fixture()
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError(f"network touched: {a[:2]}")
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_no_network_with_model_dir_or_checkpoint(capsys, monkeypatch, no_network):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert call(capsys, "--mode", "info", "--model-dir", BUNDLED)[0] == 0
    assert call(capsys, "--mode", "action", "--checkpoint", BUNDLED_PT)[0] == 0


def test_no_network_when_offline(capsys, no_network):
    code, out, _ = call(capsys, "--mode", "info")  # HF_HUB_OFFLINE=1 from conftest
    assert code == 0 and out["source"] == "bundled sample"


def test_default_tries_the_hub_then_falls_back(capsys, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a closed local port: fails at once
    code, out, _ = call(capsys, "--mode", "info")
    assert code == 0 and out["source"] == "bundled sample" and "127.0.0.1:9" in out["note"]


# --- fuzzing --------------------------------------------------------------------------------------

KEYS = sorted(torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)["Policy"])
NEEDED = [k for k in KEYS if k.startswith(("network_body._body_endoder.", "action_model._continuous_distribution.",
                                           NORMALIZER, "network_body.processors.0.normalizer."))]
OBS = np.random.RandomState(3).randn(8, 59).astype(np.float32)
REFERENCE = ort_deterministic(BUNDLED_ONNX, OBS)

mutation = st.one_of(
    st.tuples(st.just("drop"), st.sampled_from(NEEDED)),
    st.tuples(st.just("extra"), st.sampled_from(["foo", "network_body.new.weight", "action_model.x", "Policy.z",
                                                 "network_body._body_endoder.seq_layers.1.weight", "critic.w"])),
    st.tuples(st.just("dtype"), st.sampled_from(NEEDED), st.sampled_from([torch.float64, torch.float16, torch.int32,
                                                                           torch.bool, torch.bfloat16])),
    st.tuples(st.just("shape"), st.sampled_from(NEEDED), st.integers(-3, 3).filter(bool)),
    st.tuples(st.just("poison"), st.sampled_from(NEEDED), st.sampled_from([float("nan"), float("inf"), -float("inf")])),
    st.tuples(st.just("scalar"), st.sampled_from(NEEDED)),
)


def mutate(state: dict, change) -> dict:
    state = dict(state)
    op, key = change[0], change[1]
    value = state.get(key)
    if op != "extra" and not isinstance(value, torch.Tensor):
        return state  # an earlier change already removed or replaced it
    if op == "drop":
        del state[key]
    elif op == "extra":
        state[key] = torch.zeros(3)
    elif op == "dtype":
        state[key] = value.to(change[2])
    elif op == "shape":
        grown = list(value.shape) or [1]
        grown[0] = max(0, grown[0] + change[2])
        rows = value.reshape(value.shape[0] if value.dim() else 1, -1)
        resized = torch.zeros((grown[0], rows.shape[1]), dtype=value.dtype)
        resized[:min(grown[0], rows.shape[0])] = rows[:grown[0]]  # values kept where the shapes overlap
        resized = resized.reshape(grown)
        state[key] = resized
    elif op == "poison":
        poisoned = value.clone().reshape(-1)
        if poisoned.dtype.is_floating_point and poisoned.numel():
            poisoned[poisoned.numel() // 2] = change[2]
        state[key] = poisoned.reshape(value.shape)
    elif op == "scalar":
        state[key] = 1.5
    return state


POLICY = torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)["Policy"]


@settings(max_examples=150, deadline=None)
@given(changes=st.lists(mutation, min_size=1, max_size=3, unique_by=lambda change: change[1]))
@example(changes=[("drop", "network_body._body_endoder.seq_layers.4.weight"),
                  ("drop", "network_body._body_endoder.seq_layers.4.bias")])  # (found by hypothesis: a whole smaller policy)
def test_fuzzed_checkpoints_load_correctly_or_are_refused(changes):
    """Each mutated state dict saved as a checkpoint file and loaded the public way."""
    state = POLICY
    for change in changes:
        state = mutate(state, change)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "Huggy-600017.pt"
        torch.save({"Policy": state}, path)
        try:
            policy = I.load(path, engine="torch")
        except I.UsageError as exc:
            assert path.name in str(exc), str(exc)  # the refusal names the file
            return
    # Loaded: then the answer must be the right one, the original policy's; or, when the last hidden layer's
    # weight and bias are both gone, that of the smaller policy the file now is (nothing in it says otherwise).
    layer = "network_body._body_endoder.seq_layers.4."
    whole = not any(k.startswith(layer) for k in state)
    got = policy.act(OBS)["continuous_actions"]
    assert np.abs(got - (numpy_actions(state, OBS) if whole else REFERENCE)).max() <= 1e-5, changes


def numpy_actions(state: dict, obs: np.ndarray) -> np.ndarray:
    """A Huggy-shaped checkpoint's deterministic actions in float64 numpy, from its weights alone: normaliser,
    Linear + SiLU layers, mu, clip(mu, -3, 3) / 3 (ML-Agents' forward, written here independently)."""
    w = {k: v.double().numpy() for k, v in state.items() if isinstance(v, torch.Tensor)}
    x = np.clip((obs - w[NORMALIZER + "running_mean"]) / np.sqrt(w[NORMALIZER + "running_variance"]
                                                                / w[NORMALIZER + "normalization_steps"]), -5, 5)
    i = 0
    while f"network_body._body_endoder.seq_layers.{i}.weight" in w:
        x = x @ w[f"network_body._body_endoder.seq_layers.{i}.weight"].T + w[f"network_body._body_endoder.seq_layers.{i}.bias"]
        x, i = x / (1 + np.exp(-x)), i + 2
    mu = x @ w["action_model._continuous_distribution.mu.weight"].T + w["action_model._continuous_distribution.mu.bias"]
    return np.clip(mu, -3, 3) / 3


def test_the_numpy_forward_is_huggys():
    """The oracle above, held to ML-Agents' own ONNX on the unchanged checkpoint."""
    assert np.abs(numpy_actions(POLICY, OBS) - REFERENCE).max() <= 1e-5


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=80),
                      st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=70)
                      .map(lambda xs: ",".join(repr(x) for x in xs))))
def test_fuzzed_observations_parse_or_refuse(text):
    try:
        obs = parse_obs(text, FUZZ_POLICY.settings, 0, FUZZ_POLICY.normalizers)
    except I.UsageError as exc:
        assert str(exc).startswith("--obs")
        return
    assert len(obs) == 1 and obs[0].dtype == np.float32 and obs[0].shape == (59,) and np.isfinite(obs[0]).all()


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=59, max_size=59))
def test_fuzzed_lists_round_trip(values):
    obs = parse_obs(",".join(repr(v) for v in values), FUZZ_POLICY.settings, 0, FUZZ_POLICY.normalizers)
    assert len(obs) == 1 and np.array_equal(obs[0], np.asarray(values, np.float32))


FUZZ_POLICY = I.load(BUNDLED_PT)


def test_foreign_onnx_files_refused(capsys, tmp_path):
    import onnx
    from onnx import TensorProto, helper
    old = helper.make_graph([helper.make_node("Identity", ["vector_observation"], ["action"])], "old",
                            [helper.make_tensor_value_info("vector_observation", TensorProto.FLOAT, [1, 59])],
                            [helper.make_tensor_value_info("action", TensorProto.FLOAT, [1, 59])])
    model = helper.make_model(old, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "old.onnx"))
    (tmp_path / "garbage.onnx").write_bytes(b"garbage")
    for name, words in (("old.onnx", "cannot compare"), ("garbage.onnx", "not an ONNX file"),
                        ("missing.onnx", "no such file")):
        code, _, err = call(capsys, "--mode", "onnx-compare", "--model-dir", BUNDLED, "--onnx", tmp_path / name)
        assert code == 2 and words in err, (name, err)


@pytest.mark.parametrize("mode", ["export-onnx", "precision", "onnx-compare"])
def test_a_machine_without_torch_gets_one_line_saying_how_to_install_it(tmp_path, mode):
    """torch hidden from the interpreter (as on a fresh machine or a `pip install .` alone): the modes that need the
    rebuilt modules end in exit 2 and one line naming what to install, no traceback; the bundled sample's ONNX
    still runs `info` (tests/test_torch_free.py has the rest) and listing the checkpoints still works."""
    import subprocess
    import sys

    from conftest import ROOT, child_env
    program = ("import runpy, sys; sys.modules['torch'] = None; "
               f"sys.argv = ['inference.py', '--mode', {mode!r}]; runpy.run_path({str(ROOT / 'inference.py')!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=child_env(),
                          input="")
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert done.stderr.strip().splitlines() == [
        f"error: --mode {mode} works on ML-Agents' modules rebuilt in torch, which is not installed: "
        "pip install \".[torch]\" (or pip install torch; Ascend hosts: CANN's torch and torch_npu)"], done.stderr
    for works in ("checkpoints", "info"):
        done = subprocess.run([sys.executable, "-c", program.replace(repr(mode), repr(works))], capture_output=True,
                              text=True, timeout=120, env=child_env())
        assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stderr[-500:]
