"""Checkpoints and the files beside them, read safely: a pickle that would run code is refused and never runs,
damaged and crafted files are refused in one line before their data is read (tensors whose views would need
gigabytes, sparse or complex ones, deep or cyclic structures), a fuzzed state dict loads right or is refused,
--expect-sha256, and a malformed run_logs/training_status.json is one warning, never a failure."""

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import (
    BUNDLED,
    BUNDLED_ONNX,
    BUNDLED_PT,
    EXAMPLES,
    FIXTURES,
    call,
    copy_run,
    ort_deterministic,
    refused,
    run,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import inference as I
from mlagents_inference.core.sources import check_sha256, file_sha256, final_step, status_entry, training_status
from mlagents_inference.loaders.checkpoint import read_checkpoint, validate_tensors


class RunsCode:
    """A pickle that would create a file when unpickled without weights_only."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


NORMALIZER = "network_body.observation_encoder.processors.0.normalizer."
MU_BIAS = "action_model._continuous_distribution.mu.bias"
CHECKPOINT = torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)  # the bundled sample's, as saved
POLICY = CHECKPOINT["Policy"]


# --- pickles and damaged files ------------------------------------------------------------------------------


def test_pickle_that_runs_code_is_refused_and_never_runs(capsys, tmp_path):
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt"
    torch.save({"Policy": RunsCode(marker)}, evil)
    refused(run(capsys, "--mode", "action", "--checkpoint", evil), "evil.pt", "could run code")
    assert not marker.exists()
    torch.save(RunsCode(marker), tmp_path / "evil2.pt")  # code at the top level of the pickle
    refused(run(capsys, "--mode", "info", "--checkpoint", tmp_path / "evil2.pt"), "refused")
    assert not marker.exists()


def broken_files(tmp_path):
    whole = BUNDLED_PT.read_bytes()
    (tmp_path / "truncated.pt").write_bytes(whole[: len(whole) // 3])
    small = (EXAMPLES / "vector" / "Vector" / "Vector-50000.pt").read_bytes()
    (tmp_path / "truncated_half.pt").write_bytes(small[: len(small) // 2])  # (torch's reader: EINVAL)
    (tmp_path / "random.pt").write_bytes(np.random.RandomState(0).bytes(4096))
    (tmp_path / "empty.pt").write_bytes(b"")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "not_mlagents.pt")
    torch.save([1, 2, 3], tmp_path / "a_list.pt")
    chain = dict(POLICY)
    chain["network_body._body_endoder.seq_layers.2.weight"] = torch.zeros(512, 100)
    torch.save({"Policy": chain}, tmp_path / "no_chain.pt")
    nan = dict(POLICY)
    nan[NORMALIZER + "running_mean"] = torch.full((59,), float("nan"))
    torch.save({"Policy": nan}, tmp_path / "nan_normalizer.pt")
    inf = dict(POLICY)
    inf["action_model._continuous_distribution.mu.bias"] = torch.full((21,), float("inf"))
    torch.save({"Policy": inf}, tmp_path / "inf_mu.pt")
    return {
        "truncated.pt": "damaged",
        "truncated_half.pt": "damaged/truncated",
        "random.pt": "refused",
        "empty.pt": "refused",
        "not_mlagents.pt": "not an ML-Agents checkpoint",
        "a_list.pt": "not an ML-Agents checkpoint",
        "no_chain.pt": "seq_layers.2.weight",
        "nan_normalizer.pt": "NaN",
        "inf_mu.pt": "NaN or infinite",
    }


def test_broken_checkpoints_refused(capsys, tmp_path):
    for name, words in broken_files(tmp_path).items():
        refused(run(capsys, "--mode", "action", "--checkpoint", tmp_path / name), name, words)


def test_legacy_format_checkpoint_still_loads(tmp_path):
    """Not a zip: loaded without mmap, validated the same way."""
    path = tmp_path / "Huggy-600017.pt"
    torch.save(CHECKPOINT, path, _use_new_zipfile_serialization=False)
    obj = read_checkpoint(path)
    assert torch.equal(obj["Policy"][MU_BIAS], POLICY[MU_BIAS])


def test_every_fixture_checkpoint_passes_validation():
    files = sorted(EXAMPLES.rglob("*.pt")) + (sorted(FIXTURES.rglob("*.pt")) if FIXTURES.exists() else [])
    assert len(files) >= 19
    for path in files:
        obj = read_checkpoint(path)  # memory-mapped zip, validated
        assert isinstance(obj["Policy"], dict), path


# --- crafted tensors, refused before their data is read -----------------------------------------------------


def crafted(tmp_path, key, value, where="Policy") -> Path:
    """The bundled checkpoint with obj[where][key] = value, saved as a new file under tmp_path."""
    obj = dict(CHECKPOINT)
    obj[where] = dict(obj[where])
    obj[where][key] = value
    path = tmp_path / f"crafted-{len(list(tmp_path.iterdir()))}.pt"
    torch.save(obj, path)
    return path


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize(
    "value,words",
    [
        (lambda: torch.zeros(1).expand(10**10), "10,000,000,000 elements"),  # 37 GiB view of 4 bytes
        (lambda: torch.zeros(1, 21).expand(10**6, 21), "elements over a storage"),
        (lambda: torch.eye(21).to_sparse(), "not dense"),
        (lambda: torch.eye(21).to_sparse_csr(), "not dense"),
        (lambda: torch.zeros(21, dtype=torch.complex64), "complex64"),
    ],
)
def test_crafted_tensors_refused_before_their_data_is_read(capsys, tmp_path, value, words):
    path = crafted(tmp_path, MU_BIAS, value())
    t0 = time.perf_counter()
    refused(run(capsys, "--mode", "action", "--checkpoint", path), "refused", words)
    assert time.perf_counter() - t0 < 60


def test_crafted_tensor_outside_the_policy_is_refused_too(tmp_path):
    path = crafted(tmp_path, "w", torch.zeros(1).expand(10**10), where="Optimizer:critic")
    with pytest.raises(I.UsageError, match="elements over a storage"):
        read_checkpoint(path)


def test_validate_tensors_walks_deep_and_cyclic_structures():
    deep: list = []
    inner = deep
    for _ in range(100_000):
        inner.append([])
        inner = inner[0]
    inner.append(torch.zeros(1).expand(100))
    with pytest.raises(I.UsageError, match="elements over a storage"):
        validate_tensors({"Policy": {}, "x": deep})
    cyclic: list = [torch.zeros(3)]
    cyclic.append(cyclic)
    validate_tensors({"Policy": {"a": cyclic}})  # terminates, nothing to refuse


def test_nan_in_continuous_act_size_vector(capsys, tmp_path):
    """(Size vectors are read by the policy section: not a usable policy, one line.)"""
    path = crafted(tmp_path, "continuous_act_size_vector", torch.tensor([float("nan")]))
    refused(run(capsys, "--mode", "action", "--checkpoint", path))


# --- fuzzed state dicts: loaded right, or refused naming the file -------------------------------------------

KEYS = sorted(POLICY)


NEEDED = [
    k
    for k in KEYS
    if k.startswith(
        (
            "network_body._body_endoder.",
            "action_model._continuous_distribution.",
            NORMALIZER,
            "network_body.processors.0.normalizer.",
        )
    )
]


OBS = np.random.RandomState(3).randn(8, 59).astype(np.float32)


REFERENCE = ort_deterministic(BUNDLED_ONNX, OBS)


mutation = st.one_of(
    st.tuples(st.just("drop"), st.sampled_from(NEEDED)),
    st.tuples(
        st.just("extra"),
        st.sampled_from(
            [
                "foo",
                "network_body.new.weight",
                "action_model.x",
                "Policy.z",
                "network_body._body_endoder.seq_layers.1.weight",
                "critic.w",
            ]
        ),
    ),
    st.tuples(
        st.just("dtype"),
        st.sampled_from(NEEDED),
        st.sampled_from([torch.float64, torch.float16, torch.int32, torch.bool, torch.bfloat16]),
    ),
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
        resized[: min(grown[0], rows.shape[0])] = rows[: grown[0]]  # values kept where the shapes overlap
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


@settings(max_examples=150, deadline=None)
@given(changes=st.lists(mutation, min_size=1, max_size=3, unique_by=lambda change: change[1]))
@example(
    changes=[
        ("drop", "network_body._body_endoder.seq_layers.4.weight"),  # (found by hypothesis: a whole
        ("drop", "network_body._body_endoder.seq_layers.4.bias"),
    ]
)  # smaller policy)
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
    x = np.clip(
        (obs - w[NORMALIZER + "running_mean"])
        / np.sqrt(w[NORMALIZER + "running_variance"] / w[NORMALIZER + "normalization_steps"]),
        -5,
        5,
    )
    i, layer = 0, "network_body._body_endoder.seq_layers.{}."
    while layer.format(i) + "weight" in w:
        x = x @ w[layer.format(i) + "weight"].T + w[layer.format(i) + "bias"]
        x, i = x / (1 + np.exp(-x)), i + 2
    mu = x @ w["action_model._continuous_distribution.mu.weight"].T + w["action_model._continuous_distribution.mu.bias"]
    return np.clip(mu, -3, 3) / 3


def test_the_numpy_forward_is_huggys():
    """The oracle above, held to ML-Agents' own ONNX on the unchanged checkpoint."""
    assert np.abs(numpy_actions(POLICY, OBS) - REFERENCE).max() <= 1e-5


# --- --expect-sha256 ----------------------------------------------------------------------------------------


def test_expect_sha256(capsys):
    good = file_sha256(BUNDLED_PT)
    code, out, _ = call(capsys, "--mode", "info", "--model-dir", BUNDLED, "--expect-sha256", good.upper())
    assert code == 0 and out["sha256"] == good
    refused(call(capsys, "--mode", "info", "--model-dir", BUNDLED, "--expect-sha256", "0" * 64), good, "refusing")


def test_check_sha256(tmp_path):
    good = file_sha256(BUNDLED_PT)
    assert check_sha256(BUNDLED_PT, None) == good
    assert check_sha256(BUNDLED_PT, " " + good.upper() + " ") == good
    with pytest.raises(I.UsageError, match="refusing it"):
        check_sha256(BUNDLED_PT, "0" * 64)
    with pytest.raises(I.UsageError, match="cannot read|no such|is a folder"):
        check_sha256(tmp_path / "absent.pt", "0" * 64)


def test_checkpoints_mode_honours_expect_sha256(capsys):
    """Needs mode_checkpoints to call check_sha256(<the checkpoint it reports as default>,
    args.expect_sha256) before listing."""
    good = file_sha256(BUNDLED_PT)
    code, out, err = run(capsys, "--mode", "checkpoints", "--model-dir", BUNDLED, "--expect-sha256", good)
    assert code == 0, err
    refused(run(capsys, "--mode", "checkpoints", "--model-dir", BUNDLED, "--expect-sha256", "0" * 64), "refusing it")


# --- the files beside the checkpoint: training_status.json, configuration.yaml ------------------------------


@pytest.fixture()
def sample(tmp_path) -> Path:
    """A writable copy of the bundled sample run folder."""
    return copy_run(BUNDLED, tmp_path)


BAD_STATUS = {
    "behaviour is a list": json.dumps({"Huggy": []}),
    "checkpoints not a list": json.dumps({"Huggy": {"checkpoints": 5}}),
    "entries not objects": json.dumps({"Huggy": {"checkpoints": [1, "x", None]}}),
    "aux paths not a list": json.dumps({"Huggy": {"checkpoints": [{"steps": 1, "auxillary_file_paths": 7}]}}),
    "aux paths not text": json.dumps({"Huggy": {"checkpoints": [{"steps": 1, "auxillary_file_paths": [{}]}]}}),
    "steps text": json.dumps({"Huggy": {"checkpoints": [{"steps": "600017"}], "final_checkpoint": {"steps": "x"}}}),
    "final is a list": json.dumps({"Huggy": {"final_checkpoint": []}}),
    "top level list": "[1, 2, 3]",
    "nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    "nested objects": '{"Huggy": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001,
    "not json": "{",
    "not utf-8": b"\xff\xfe\x00{",
}


def write_status(folder: Path, content) -> None:
    path = folder / "run_logs" / "training_status.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())


def warned_once(err: str) -> None:
    warnings = [l for l in err.splitlines() if l.startswith("[warn]")]
    assert len(warnings) == 1 and "ignored" in warnings[0] and "training_status.json" in warnings[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", list(BAD_STATUS))
def test_bad_status_file_checkpoints_mode(capsys, sample, case):
    write_status(sample, BAD_STATUS[case])
    code, out, err = run(capsys, "--mode", "checkpoints", "--model-dir", sample, "--json")
    assert code == 0, err
    warned_once(err)
    rows = json.loads(out)["checkpoints"]
    assert [r["file"] for r in rows] == ["Huggy-600017.pt"] and rows[0]["reward"] is None


@pytest.mark.parametrize("case", ["behaviour is a list", "nested 100000 deep"])
@pytest.mark.parametrize("mode", [["onnx-compare"], ["export-onnx"], ["benchmark", "--runs", "5"]])
def test_bad_status_file_other_modes(capsys, sample, tmp_path, case, mode):
    """Without the step's own ONNX, the top-level one is chosen through final_step()."""
    (sample / "Huggy" / "Huggy-600017.onnx").unlink()
    write_status(sample, BAD_STATUS[case])
    extra = ["--output", tmp_path / "m.onnx"] if mode[0] == "export-onnx" else []
    code, out, err = run(capsys, "--mode", *mode, "--model-dir", sample, *extra)
    assert code == 0, err
    warned_once(err)


def test_status_odd_but_valid_values(sample):
    write_status(
        sample,
        '{"Huggy": {"checkpoints": [{"steps": 600017, "reward": NaN, "auxillary_file_paths": null,'
        ' "file_path": "x/Huggy-600017.onnx", "extra": {"a": [1]}}], "final_checkpoint": '
        '{"steps": 600017, "reward": 2}}, "metadata": 5}',
    )
    status = training_status(sample, "Huggy")
    assert status_entry(status, Path("Huggy-600017.pt"), 600017)["reward"] is None  # NaN: no reward yet
    assert final_step(sample, "Huggy") == 600017
    assert training_status(sample, "Other") == {}


def test_the_checkpoint_decides_the_trainer_not_the_configuration(capsys, tmp_path):
    run_dir = copy_run(EXAMPLES / "vector", tmp_path)
    config = run_dir / "configuration.yaml"
    assert "trainer_type: ppo" in config.read_text()
    config.write_text(config.read_text().replace("trainer_type: ppo", "trainer_type: sac"))
    code, out, err = run(capsys, "--mode", "info", "--model-dir", run_dir, "--json")
    assert code == 0 and json.loads(out)["trainer"] == "ppo", err


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "run_logs").mkdir()
    return folder


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)


any_json = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)


record = st.fixed_dictionaries(
    {},
    optional={
        "steps": st.one_of(st.integers(-5, 10**7), any_json),
        "file_path": st.one_of(st.text(max_size=30), any_json),
        "reward": st.one_of(st.floats(allow_nan=True, allow_infinity=True), any_json),
        "auxillary_file_paths": st.one_of(st.lists(st.text(max_size=30), max_size=3), any_json),
    },
)


status_like = st.fixed_dictionaries(
    {
        "Huggy": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "checkpoints": st.one_of(st.lists(st.one_of(record, any_json), max_size=4), any_json),
                    "final_checkpoint": st.one_of(record, any_json),
                },
            ),
            any_json,
        )
    },
    optional={"metadata": any_json},
)


deep = st.integers(1, 200_000).map(lambda n: "[" * n + "]" * n)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(content=st.one_of(any_json.map(json.dumps), status_like.map(json.dumps), deep, st.binary(max_size=40)))
def test_fuzzed_status_files(fuzz_dir, content):
    (fuzz_dir / "run_logs" / "training_status.json").write_bytes(
        content if isinstance(content, bytes) else content.encode()
    )
    status = training_status(fuzz_dir, "Huggy")  # must not raise, whatever the file holds
    for ckpt, step in ((Path("Huggy-600017.pt"), 600017), (Path("checkpoint.pt"), None)):
        entry = status_entry(status, ckpt, step)
        assert entry == {} or {"steps", "file_path", "auxillary_file_paths"} <= set(entry), entry
        reward = entry.get("reward")
        assert reward is None or (type(reward) in (int, float) and np.isfinite(reward))
    final = final_step(fuzz_dir, "Huggy")
    assert final is None or (type(final) is int and final >= 0)


@settings(max_examples=200, deadline=None)
@given(status=st.one_of(any_json, status_like), step=st.one_of(st.none(), st.integers(-5, 10**7)))
def test_fuzzed_status_entry_on_raw_structures(status, step):
    entry = status_entry(status, Path("Huggy-600017.pt"), step)
    assert entry == {} or {"steps", "file_path", "auxillary_file_paths"} <= set(entry), entry
