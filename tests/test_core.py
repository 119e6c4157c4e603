"""loading, the policy's numbers against ML-Agents' ONNX, conventions, devices, exit codes.
The reference is always ML-Agents' own ONNX run by a bare onnxruntime session (conftest's
ort_deterministic / ort_mu), or a figure read straight from the checkpoint with torch.load;
never a number computed by inference.py."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import AGENT, BUNDLED, BUNDLED_ONNX, BUNDLED_PT, call, cli, ort_deterministic, ort_mu

import inference as I
from mlagents_inference.api.policy import load_checkpoint
from mlagents_inference.core.inputs import parse_obs
from mlagents_inference.core.observations import random_inputs
from mlagents_inference.core.sources import (
    default_checkpoint,
    file_sha256,
    find_behavior,
    list_checkpoints,
    locate_model,
    pick_hub_files,
)
from mlagents_inference.engines import torch_devices as engines
from mlagents_inference.engines.devices import parse_device
from mlagents_inference.engines.factory import choose_engine
from mlagents_inference.engines.torch_devices import full_float32, resolve_device, select_device

CASES = [  # (model folder, checkpoint, its ML-Agents ONNX)
    pytest.param("bundled", "Huggy/Huggy-600017.pt", "Huggy/Huggy-600017.onnx", id="bundled-huggy-final"),
    pytest.param("checkpoint.pt", "Huggy/checkpoint.pt", "Huggy.onnx", id="bundled-as-checkpoint.pt"),
    pytest.param("agent", "Vector/Vector-50000.pt", "Vector/Vector-50000.onnx", id="vector-50000-no-normalizer"),
    pytest.param("agent", "Vector/Vector-100000.pt", "Vector.onnx", id="vector-final-no-normalizer"),
]
STATE = torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)["Policy"]  # the checkpoint as saved
SIGMA = np.exp(STATE["action_model._continuous_distribution.log_sigma"].numpy().reshape(-1).astype(np.float64))


@pytest.fixture(scope="module")
def as_checkpoint_pt(tmp_path_factory) -> Path:
    """The bundled run folder with its final checkpoint saved as <Behavior>/checkpoint.pt, as mlagents-learn
    also writes it."""
    import shutil

    base = tmp_path_factory.mktemp("checkpoint_pt")
    (base / "Huggy").mkdir()
    shutil.copy(BUNDLED_PT, base / "Huggy" / "checkpoint.pt")
    shutil.copy(BUNDLED / "Huggy.onnx", base / "Huggy.onnx")
    return base


def folder(name: str, request=None) -> Path:
    if name == "checkpoint.pt":
        return request.getfixturevalue("as_checkpoint_pt")
    return {"bundled": BUNDLED, "agent": AGENT}[name]


def rs_obs(seed: int, rows=None, width: int = 59) -> np.ndarray:
    """The seed's observation convention, stated independently: np.random.RandomState(seed).randn."""
    shape = (width,) if rows is None else (rows, width)
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def observations(policy, rows=32) -> np.ndarray:
    """Normal draws, the named observations, and values far outside the normalizer's range."""
    width = policy.settings.inputs[0].shape[0]
    rng = np.random.RandomState(1234)
    named = [
        np.zeros(width),
        np.ones(width),
        -np.ones(width),
        parse_obs("boundary", policy.settings, 0, policy.normalizers)[0],
        np.full(width, 1e4),
        np.full(width, -1e4),
    ]
    return np.vstack([rng.randn(rows, width) * 3, *named]).astype(np.float32)


@pytest.mark.parametrize("engine", ["torch", "onnxruntime"])
@pytest.mark.parametrize("where,pt,onnx_file", CASES)
def test_every_engine_equals_mlagents_onnx(request, where, pt, onnx_file, engine):
    base = folder(where, request)
    policy = I.load(base / pt, engine=engine)
    assert policy.info["engine"] == engine
    obs = observations(policy)
    reference = ort_deterministic(base / onnx_file, obs)
    got = policy.act(obs)["continuous_actions"]
    assert got.shape == reference.shape == (len(obs), policy.settings.continuous_size)
    assert np.abs(got - reference).max() <= 1e-5
    for row in (0, 5, len(obs) - 1):  # single observations, as a control loop sends them
        assert np.abs(policy.act(obs[row])["continuous_actions"] - reference[row]).max() <= 1e-5
        assert np.abs(policy.act(obs[row : row + 1])["continuous_actions"] - reference[row : row + 1]).max() <= 1e-5


@pytest.mark.parametrize("where,pt,onnx_file", CASES)
def test_float64_reference_close_to_onnx(request, where, pt, onnx_file):
    base = folder(where, request)
    policy = I.load(base / pt)
    obs = observations(policy)
    flat, _, _ = policy.prepare(obs)
    ref64 = policy.reference(flat)["deterministic_continuous_actions"]  # precision mode's float64 reference
    assert ref64.dtype == np.float64
    assert np.abs(ref64 - ort_deterministic(base / onnx_file, obs)).max() < 1e-5


def test_architecture_inferred_from_shapes():
    huggy = load_checkpoint(BUNDLED_PT)
    s = huggy.settings
    assert ([i.shape for i in s.inputs], s.continuous_size, s.hidden_units, s.num_layers) == ([(59,)], 21, 512, 3)
    assert huggy.parameters == 566_805  # the original NPU adaptation's figure for Huggy
    normalizer = huggy.actor.network_body.observation_encoder.processors[0].normalizer
    assert s.normalize and int(normalizer.normalization_steps) == 600_018 and huggy.global_step == 600_017
    assert I.load(BUNDLED_PT).info["parameters"] == 566_805
    small = load_checkpoint(AGENT / "Vector" / "Vector-100000.pt")
    t = small.settings
    assert ([i.shape for i in t.inputs], t.continuous_size, t.hidden_units, t.num_layers) == ([(8,)], 2, 32, 2)
    assert not t.normalize and small.parameters == 8 * 32 + 32 + 32 * 32 + 32 + 32 * 2 + 2


def test_low_precision_keeps_normalizer_float32():
    policy = I.load(BUNDLED_PT, dtype="float16")  # auto: the torch engine for float16
    assert policy.info["engine"] == "torch"
    actor = policy.engine.heads.actor
    normalizer = actor.network_body.observation_encoder.processors[0].normalizer
    assert normalizer.running_variance.dtype == torch.float32 and normalizer.running_mean.dtype == torch.float32
    assert actor.action_model._continuous_distribution.mu.weight.dtype == torch.float16
    # float16 cannot even hold the accumulated running_variance: the reason the normalizer stays float32
    variance = STATE["network_body.observation_encoder.processors.0.normalizer.running_variance"]
    assert not torch.isfinite(variance.half()).all()
    obs = observations(policy)
    mu16 = policy.act(obs)["continuous_actions"]
    assert np.isfinite(mu16).all()
    assert np.abs(mu16 - ort_deterministic(BUNDLED_ONNX, obs)).max() < 0.05


# --- the original NPU adaptation's conventions ------------------------------------------------------------------


def test_random_observation_convention(policy):
    obs = rs_obs(0)
    assert np.allclose(obs[:3], [1.7640524, 0.4001572, 0.9787380], atol=1e-6)  # the original NPU adaptation's obs[:3]
    random = parse_obs("random", policy.settings, 0, policy.normalizers)
    assert len(random) == 1 and random[0].dtype == np.float32 and np.array_equal(random[0], obs)
    (single,) = random_inputs(policy.settings, 0)
    assert single.shape == (59,) and np.array_equal(single, obs)
    (batch,) = random_inputs(policy.settings, 0, 8)
    assert batch.shape == (8, 59) and np.array_equal(batch, rs_obs(0, 8))
    assert np.array_equal(batch[0], obs)  # row 0 of a batch is the single observation


def expected_sample(obs: np.ndarray, z: np.ndarray) -> np.ndarray:
    """clip(mu + z * exp(log_sigma), -3, 3) / 3, mu from ML-Agents' ONNX, log_sigma from the checkpoint."""
    mu = ort_mu(BUNDLED_ONNX, np.atleast_2d(obs)).astype(np.float64)
    return (np.clip(mu + np.atleast_2d(z) * SIGMA, -3, 3) / 3).reshape(np.shape(z))


def test_noise_convention(policy):
    """Noise: torch.randn((rows, act_dim), generator=torch.Generator().manual_seed(seed)) on the
    CPU; a control loop (one generator) draws one row per step, step 0 as `sample`."""
    z = torch.randn((1, 21), generator=torch.Generator().manual_seed(0)).numpy()[0]
    assert np.allclose(z[:2], [-1.1258, -1.1524], atol=1e-4)  # the original NPU adaptation's z for seed 0
    obs = rs_obs(0)
    one = policy.act(obs, deterministic=False, seed=0)["continuous_actions"]
    assert one.shape == (21,) and np.abs(one - expected_sample(obs, z)).max() < 1e-5
    rows = torch.randn((4, 21), generator=torch.Generator().manual_seed(0)).numpy()  # a batch: one randn((N, act_dim))
    batch = policy.act(np.repeat(obs[None], 4, axis=0), deterministic=False, seed=0)["continuous_actions"]
    assert np.abs(batch - expected_sample(np.repeat(obs[None], 4, axis=0), rows)).max() < 1e-5
    generator, again = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    steps = [policy.act(obs, deterministic=False, generator=generator)["continuous_actions"] for _ in range(3)]
    for step in steps:
        assert np.abs(step - expected_sample(obs, torch.randn(21, generator=again).numpy())).max() < 1e-5
    assert np.array_equal(steps[0], one) and not np.array_equal(steps[1], one)


@pytest.mark.parametrize("engine", ["torch", "onnxruntime"])
def test_sampled_action_formula(engine):
    """sampled = clip(mu + z * exp(log_sigma), -3, 3) / 3 with mu read from ML-Agents' ONNX."""
    policy = I.load(BUNDLED_PT, engine=engine)
    obs = rs_obs(3, 16)
    z = torch.randn((16, 21), generator=torch.Generator().manual_seed(3)).numpy()
    det = policy.act(obs)["continuous_actions"]
    sampled = policy.act(obs, deterministic=False, seed=3)["continuous_actions"]
    assert np.abs(sampled - expected_sample(obs, z)).max() < 1e-5
    assert np.abs(det - ort_deterministic(BUNDLED_ONNX, obs)).max() < 1e-5
    assert not np.allclose(sampled, det)  # the noise really moved the actions


def test_sample_mode_reproducible_and_correct(capsys):
    code, out, _ = call(capsys, "--mode", "sample", "--seed", "5", "--model-dir", BUNDLED)
    assert code == 0 and out["identical"] is True and out["seed"] == 5
    obs = rs_obs(5)
    z = torch.randn(21, generator=torch.Generator().manual_seed(5)).numpy()
    assert np.abs(np.array(out["sampled"]) - expected_sample(obs, z)).max() < 1e-5
    assert np.allclose(out["sigma"], SIGMA, atol=1e-7)


# --- observations ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy():
    return I.load(BUNDLED_PT)


def test_named_observations(policy):
    def one(text, seed=0):
        values = parse_obs(text, policy.settings, seed, policy.normalizers)
        assert len(values) == 1 and values[0].dtype == np.float32 and values[0].shape == (59,)
        return values[0]

    assert np.array_equal(one("zeros"), np.zeros(59, np.float32))
    assert np.array_equal(one("ones"), one("1")) and np.array_equal(one("ones"), np.ones(59, np.float32))
    assert np.array_equal(one("ones_neg"), one("-1")) and np.array_equal(one("ones_neg"), -np.ones(59, np.float32))
    assert np.array_equal(one("random", 7), rs_obs(7))
    assert np.array_equal(one("-0.5"), np.full(59, -0.5, np.float32))


def test_boundary_sits_on_the_clip_edges(policy):
    obs = parse_obs("boundary", policy.settings, 0, policy.normalizers)[0].astype(np.float64)
    prefix = "network_body.observation_encoder.processors.0.normalizer."
    steps = int(STATE[prefix + "normalization_steps"])
    std = np.sqrt(STATE[prefix + "running_variance"].numpy().astype(np.float64) / steps)
    normalized = (obs - STATE[prefix + "running_mean"].numpy()) / std
    assert np.allclose(np.abs(normalized), 5.0, rtol=1e-5)
    assert (np.sign(normalized[::2]) > 0).all() and (np.sign(normalized[1::2]) < 0).all()


def test_comma_list(policy):
    values = np.linspace(-2, 2, 59)
    text = ",".join(f"{v:.2f}" for v in values)
    assert np.allclose(parse_obs(text, policy.settings, 0, policy.normalizers)[0], np.round(values, 2), atol=1e-6)


@pytest.mark.parametrize(
    "text,words",
    [
        ("1,2,3", "expected 59 numbers"),
        (",".join(["1"] * 60), "expected 59 numbers"),
        ("nan", "holds nan, inf"),
        ("inf", "holds nan, inf"),
        ("-inf", "holds nan, inf"),
        ("1e39", "beyond float32"),
        ("abc", "not a number"),
        ("", "not a number"),
        (",".join(["1"] * 58 + ["x"]), "not a number"),
        ("1,,2", "not a number"),
    ],
)
def test_bad_observations_refused(policy, text, words):
    with pytest.raises(I.UsageError, match=words):
        parse_obs(text, policy.settings, 0, policy.normalizers)


def test_negative_values_typed_without_equals(capsys):
    code, out, err = call(capsys, "--mode", "action", "--obs", "-0.5", "--model-dir", BUNDLED)
    assert code == 0 and out["obs"] == [-0.5] * 59, err
    text = ",".join(f"{v:.2f}" for v in np.linspace(-2, 2, 59))
    code, out, err = call(capsys, "--mode", "action", "--obs", text, "--seed", "5", "--model-dir", BUNDLED)
    assert code == 0 and out["obs"][0] == -2.0 and len(out["actions"]) == 21, err
    reference = ort_deterministic(BUNDLED_ONNX, np.array([out["obs"]], np.float32))[0]
    assert np.abs(np.array(out["actions"]) - reference).max() <= 1e-5


# --- devices, without hardware ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("auto", ("auto", None)),
        ("cpu", ("cpu", None)),
        ("CUDA", ("cuda", None)),
        ("cuda:1", ("cuda", 1)),
        ("npu", ("npu", None)),
        ("npu:7", ("npu", 7)),
    ],
)
def test_parse_device(text, expected):
    assert parse_device(text) == expected


@pytest.mark.parametrize("text", ["tpu", "cpu:0", "cuda:-1", "npu:x", "", "auto:1", "cuda:1:2"])
def test_parse_device_refuses(text):
    with pytest.raises(I.UsageError):
        parse_device(text)


@pytest.mark.parametrize(
    "npus,cudas,text,expected",
    [
        (2, 1, "auto", "npu:0"),
        (0, 1, "auto", "cuda:0"),
        (0, 0, "auto", "cpu"),
        (2, 0, "npu:1", "npu:1"),
        (0, 2, "cuda:1", "cuda:1"),
        (2, 2, "cpu", "cpu"),
        (1, 0, "npu", "npu:0"),
    ],
)
def test_select_device(npus, cudas, text, expected):
    assert select_device(text, lambda: npus, lambda: cudas) == expected


@pytest.mark.parametrize(
    "npus,cudas,text,words",
    [
        (0, 0, "npu:0", "no NPU is available"),
        (1, 0, "npu:1", "NPU 1 does not exist"),
        (0, 0, "cuda", "no CUDA GPU"),
        (0, 2, "cuda:3", "CUDA GPU 3 does not exist \\(2 available\\)"),
    ],
)
def test_select_device_refuses(npus, cudas, text, words):
    with pytest.raises(I.UsageError, match=words):
        select_device(text, lambda: npus, lambda: cudas)


def test_npu_not_probed_for_cpu(monkeypatch):
    monkeypatch.setattr(engines, "npu_count", lambda: pytest.fail("probed torch_npu for --device cpu"))
    assert str(resolve_device("cpu")) == "cpu"


def test_full_float32_on_accelerators(monkeypatch):
    """torch_npu's convolutions default to HF32 and cuDNN's to TF32; both would put a camera
    policy ~1e-3 from the ONNX. Checked on stand-ins for the flags (no accelerator here)."""
    from types import SimpleNamespace

    npu = SimpleNamespace(
        conv=SimpleNamespace(allow_hf32=True),
        matmul=SimpleNamespace(allow_hf32=True),
        aclnn=SimpleNamespace(allow_hf32=True),
    )
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    full_float32(SimpleNamespace(type="npu"))
    assert npu.conv.allow_hf32 is False and npu.matmul.allow_hf32 is False and npu.aclnn.allow_hf32 is False
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        full_float32(torch.device("cuda"))
        assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    monkeypatch.setattr(torch, "npu", SimpleNamespace(), raising=False)  # an old torch_npu: no flags
    full_float32(SimpleNamespace(type="npu"))


def test_engine_choice():
    cpu = torch.device("cpu")
    assert choose_engine("auto", cpu, "float32") == "onnxruntime"
    assert choose_engine("auto", cpu, "float16") == "torch"
    with pytest.raises(I.UsageError, match="float32 only"):
        choose_engine("onnxruntime", cpu, "bfloat16")


# --- finding the model ------------------------------------------------------------------------


def test_model_search_order(monkeypatch, tmp_path):
    agent = AGENT
    monkeypatch.setenv("HUGGY_MODEL_DIR", str(agent))
    src = locate_model(None, None, None)
    assert src.origin == "HUGGY_MODEL_DIR" and src.checkpoint.name == "Vector-100000.pt" and src.behavior == "Vector"
    src = locate_model(None, str(BUNDLED), None)
    assert src.origin == "--model-dir" and src.checkpoint.name == "Huggy-600017.pt"
    src = locate_model(str(agent / "Vector" / "Vector-50000.pt"), str(BUNDLED), None)
    assert (
        src.origin == "--checkpoint" and src.checkpoint.name == "Vector-50000.pt" and src.model_dir == agent.resolve()
    )


def test_highest_step_is_default_then_checkpoint_pt(tmp_path):
    (tmp_path / "Dog").mkdir()
    for name in ("Dog-999.pt", "Dog-1000.pt", "Dog-20.pt", "checkpoint.pt"):
        (tmp_path / "Dog" / name).write_bytes(b"")
    assert find_behavior(tmp_path) == "Dog"
    assert default_checkpoint(tmp_path, "Dog").name == "Dog-1000.pt"
    assert [p.name for p, _ in list_checkpoints(tmp_path, "Dog")] == [
        "Dog-20.pt",
        "Dog-999.pt",
        "Dog-1000.pt",
        "checkpoint.pt",
    ]
    for name in ("Dog-999.pt", "Dog-1000.pt", "Dog-20.pt"):
        (tmp_path / "Dog" / name).unlink()
    assert default_checkpoint(tmp_path, "Dog").name == "checkpoint.pt"


def test_offline_falls_back_to_bundled_sample_with_a_note(capsys):
    code, out, err = call(capsys, "--mode", "info")
    assert code == 0 and out["source"] == "bundled sample"
    assert "NOT the trained Huggy weights" in out["note"] and "NOT the trained Huggy weights" in err


def test_explicit_repo_unavailable_is_an_error(capsys):
    code, out, err = call(capsys, "--mode", "info", "--model", "someone/ppo-Other")
    assert code == 2 and "someone/ppo-Other" in err and "HF_HUB_OFFLINE" in err


def test_hub_uses_cache_when_offline(monkeypatch, tmp_path):
    """A snapshot already in the Hugging Face cache is used offline, through huggingface_hub."""
    import huggingface_hub

    snapshot = tmp_path / "snap"
    (snapshot / "Huggy").mkdir(parents=True)
    (snapshot / "Huggy" / "Huggy-2000049.pt").symlink_to(BUNDLED_PT)
    calls = []

    def fake_snapshot(repo_id, local_files_only=False, **kw):
        calls.append((repo_id, local_files_only))
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    src = locate_model(None, None, "PaulVialard/ppo-Huggy")
    assert src.origin == "hub:PaulVialard/ppo-Huggy" and src.checkpoint.name == "Huggy-2000049.pt"
    assert calls == [("PaulVialard/ppo-Huggy", True)]


def test_pick_hub_files_takes_only_the_final_checkpoint():
    files = [
        "Huggy.onnx",
        "README.md",
        "config.json",
        "configuration.yaml",
        "run_logs/training_status.json",
        "run_logs/Player-0.log",
        "Huggy/Huggy-1999992.pt",
        "Huggy/Huggy-1999992.onnx",
        "Huggy/Huggy-2000049.pt",
        "Huggy/Huggy-2000049.onnx",
        "Huggy/Huggy-199990.pt",
        "Huggy/checkpoint.pt",
        "Huggy/events.out",
    ]
    assert pick_hub_files(files) == sorted(
        [
            "Huggy.onnx",
            "config.json",
            "configuration.yaml",
            "run_logs/training_status.json",
            "Huggy/Huggy-2000049.pt",
            "Huggy/Huggy-2000049.onnx",
        ]
    )
    assert "Dog/checkpoint.pt" in pick_hub_files(["Dog.onnx", "Dog/checkpoint.pt"])


# --- output and exit codes --------------------------------------------------------------------


def test_info_json_fields(capsys):
    code, out, _ = call(capsys, "--mode", "info", "--model-dir", BUNDLED)
    assert code == 0
    for key in (
        "obs_dim",
        "action_dim",
        "hidden_units",
        "num_layers",
        "normalize",
        "normalization_steps",
        "parameters",
        "log_sigma",
        "checkpoint",
        "source",
        "device",
        "dtype",
        "versions",
        "sha256",
        "time_to_first_action_s",
    ):
        assert key in out, key
    assert out["parameters"] == 566_805 and out["device"] == "cpu" and out["normalization_steps"] == 600_018
    assert set(out["versions"]) >= {"torch", "torch_npu", "numpy", "onnxruntime"}
    assert out["sha256"] == file_sha256(BUNDLED_PT) and len(out["log_sigma"]) == 21
    reference = ort_deterministic(BUNDLED_ONNX, rs_obs(0)[None])[0]
    assert np.abs(np.array(out["deterministic_actions"]) - reference).max() <= 1e-5


def test_action_json_and_human_output(capsys):
    code, out, _ = call(capsys, "--mode", "action", "--obs", "zeros", "--model-dir", BUNDLED)
    assert code == 0 and set(out) >= {"obs", "actions"} and out["obs"] == [0.0] * 59
    assert np.abs(np.array(out["actions"]) - ort_deterministic(BUNDLED_ONNX, np.zeros((1, 59)))[0]).max() <= 1e-5
    assert I.main(["--mode", "action", "--model-dir", str(BUNDLED)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[-1] == "SUCCESS" and any(l.strip().startswith("action[:8]") for l in text)


def test_exit_codes(capsys):
    """main()'s exit codes and streams in this process, and in a real process the code the
    shell sees for a check that did not hold (0 and 2 from real processes: test_modes'
    fingerprint and test_signals_and_stdio's refusal as a user runs it)."""
    assert I.main(["--mode", "action", "--obs", "1,2", "--model-dir", str(BUNDLED)]) == 2
    out, err = capsys.readouterr()
    assert out.count("\n") <= 1 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "expected 59 numbers" in err
    assert I.main(["--mode", "nonsense"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "invalid choice" in err
    failed = cli("--mode", "precision", "--tol", "1e-12", "--samples", "4", "--model-dir", BUNDLED)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert failed.stdout.strip().splitlines()[-1].startswith("FAILED")


# --- the original NPU adaptation's published numbers, with the real weights only -----------------------------------

REAL_HUGGY = os.environ.get("HUGGY_MODEL_DIR")  # read before the autouse fixture hides it


def test_golden_numbers_from_the_seed():
    if not REAL_HUGGY or not (Path(REAL_HUGGY) / "Huggy" / "Huggy-2000049.pt").is_file():
        pytest.skip("HUGGY_MODEL_DIR does not hold the real PaulVialard/ppo-Huggy (Huggy/Huggy-2000049.pt)")
    policy = I.load(Path(REAL_HUGGY), engine="torch")
    assert Path(policy.info["checkpoint"]).name == "Huggy-2000049.pt"
    seed0 = policy.act(rs_obs(0))["continuous_actions"]
    assert np.allclose(seed0[:6], [-0.009379, 0.817283, 1.0, -1.0, 0.030736, 0.759924], atol=5e-6)
    zeros = policy.act(np.zeros(59, np.float32))["continuous_actions"]
    assert np.allclose(zeros[:6], [-0.2696, -0.0536, 0.0999, 0.4499, -0.1415, 0.2865], atol=6e-5)
    sampled = policy.act(rs_obs(0), deterministic=False, seed=0)["continuous_actions"]
    assert np.allclose(sampled[:6], [-0.3741, 0.4414, 0.9196, -1.0, 0.3126, 0.3080], atol=6e-5)
