"""The torch-free install (issue 25), pushed where its first tests did not go: batch on continuous policies, --onnx
beside a run folder, Unity's 1.x files in their run folders (the checkpoint's inputs), info's fields against the torch
install's, and which option a missing provider is blamed on."""
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import BUNDLED, EXAMPLES, FIXTURES, ROOT, child_env
from test_torch_free import TORCH, needs_torch, no_torch, no_torch_code


def with_torch(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "inference.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=child_env())


def trained(name: str):
    folder = FIXTURES / "trained" / name
    if not (folder / f"{name}.onnx").is_file():
        pytest.skip(f"{folder} is absent (development fixtures)")
    return folder


@pytest.mark.parametrize("source", [["--model-dir", EXAMPLES / "hybrid"], ["--model-dir", EXAMPLES / "sac-continuous"],
                                    ["--onnx", EXAMPLES / "onnx-interfaces" / "Crawlerish-1x.onnx"]])
def test_batch_of_a_continuous_policy_shows_its_mu(source):
    """--mode batch printed |mu| from the engine's every output; the file engine answered its deterministic ones alone
    (KeyError 'mu_abs_max', a traceback, exit 1)."""
    r = no_torch("--mode", "batch", "--batch", "4", *source)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-600:]
    assert "|mu| max" in r.stdout
    mine = json.loads(no_torch("--mode", "batch", "--batch", "4", "--json", *source).stdout)
    if not TORCH:
        return
    theirs = json.loads(with_torch("--mode", "batch", "--batch", "4", "--json", "--engine", "onnxruntime", *source).stdout)
    assert abs(mine["mu_abs_max"] - theirs["mu_abs_max"]) < 1e-5


def test_an_onnx_of_another_policy_beside_a_run_folder_is_not_this_policy():
    """--model-dir examples/vector --onnx examples/lstm/Memory.onnx ran Memory.onnx as the policy (the torch install: not
    this policy, exit 1)."""
    r = no_torch("--mode", "action", "--model-dir", EXAMPLES / "vector", "--onnx", EXAMPLES / "lstm" / "Memory.onnx", "--json")
    assert r.returncode == 1 and "not this policy" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not_this_policy" in json.loads(r.stdout)


def test_an_earlier_checkpoints_onnx_does_not_replace_the_checkpoints_weights():
    """--model-dir examples/vector (final checkpoint 100000) --onnx Vector-50000.onnx ran the 50000 weights; the torch
    install runs the checkpoint's (the --onnx is its reference): the checkpoint's own ONNX runs."""
    plain = no_torch("--mode", "action", "--model-dir", EXAMPLES / "vector", "--json")
    named = no_torch("--mode", "action", "--model-dir", EXAMPLES / "vector", "--onnx",
                     EXAMPLES / "vector" / "Vector" / "Vector-50000.onnx", "--json")
    assert plain.returncode == named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["continuous_actions"] == json.loads(plain.stdout)["continuous_actions"]


@pytest.mark.parametrize("name, shapes", [("3DBallHard", [[27], [18]]), ("DungeonEscape", [[10], [360], [1]]),
                                          ("SoccerTwos", [[264], [72]])])
def test_a_1x_file_in_its_run_folder_takes_the_checkpoints_inputs(name, shapes):
    """Unity's 1.x file concatenates the sensors into vector_observation; with the run folder (its checkpoint) the
    torch install takes obs_0..obs_k, and so must the torch-free one (get_action's DecisionSteps, check_spec, --obs,
    .npz columns). The file alone keeps its own input, as the torch install's ONNX alone does."""
    folder = trained(name)
    info = json.loads(no_torch("--mode", "info", "--model-dir", folder, "--json").stdout)
    assert [i["shape"] for i in info["inputs"]] == shapes and [i["name"] for i in info["inputs"]][0] == "obs_0"
    alone = json.loads(no_torch("--mode", "info", "--onnx", folder / f"{name}.onnx", "--json").stdout)
    assert [i["name"] for i in alone["inputs"]] == ["vector_observation"]
    got = no_torch_code(f"""
import json, numpy as np, inference
from types import SimpleNamespace
p = inference.load({str(folder)!r})
obs = [np.random.RandomState(0).randn(3, *s).astype(np.float32) for s in {shapes!r}]
mask = [np.zeros((3, b), bool) for b in p.settings.discrete_branches] or None
steps = SimpleNamespace(obs=obs, agent_id=np.arange(3), action_mask=mask)
a = p.get_action(steps)
flat = np.concatenate([o for o in obs], axis=1)
q = inference.load({str(folder / f"{name}.onnx")!r})
b = q.act(flat)
print(json.dumps({{"c": a.continuous.tolist(), "d": a.discrete.tolist(), "qc": b.get("continuous_actions", np.zeros((3, 0))).tolist(),
                  "qd": b.get("discrete_actions", np.zeros((3, 0))).tolist()}}))
""")
    assert np.allclose(got["c"], got["qc"], atol=1e-6) and got["d"] == got["qd"]


@needs_torch
def test_boundary_inputs_of_a_1x_run_folder_equal_the_torch_installs():
    folder = trained("3DBallHard")
    args = ("--mode", "action", "--obs", "boundary", "--model-dir", folder, "--json")
    mine, theirs = json.loads(no_torch(*args).stdout), json.loads(with_torch(*args, "--engine", "onnxruntime").stdout)
    for name in ("obs_0", "obs_1"):
        assert np.allclose(mine["obs"][name], theirs["obs"][name], atol=1e-4)
    assert np.allclose(mine["continuous_actions"], theirs["continuous_actions"], atol=1e-5)


# the torch install's info for these (its counts and fields: LoadedCheckpoint.parameters, the checkpoint's value heads)
@pytest.mark.parametrize("case, field, wanted", [
    ("goal-hyper", "parameters", 35685), ("goal-two-signals", "parameters", 2306), ("goal-visual-signal", "parameters", 14197),
    ("shared-critic", "shared_critic", True), ("visual-resnet", "shared_critic", True), ("vector", "shared_critic", False),
    ("bundled", "behavior", "Huggy"),
])
def test_info_fields_equal_the_torch_installs(case, field, wanted):
    """A hypernetwork's generated layer has a bias of its own (the torch install counts it); a shared critic's value
    heads are in the checkpoint (the run folder's configuration says so); the bundled sample's behaviour is Huggy, not
    the name of its checkpoint's ONNX (Huggy-600017)."""
    source = ["--model-dir", BUNDLED if case == "bundled" else EXAMPLES / case]
    r = no_torch("--mode", "info", *source, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[field] == wanted


def test_a_missing_provider_named_by_providers_is_blamed_on_providers():
    """--providers cuda on a CPU onnxruntime said '--device cpu: this onnxruntime has no CUDAExecutionProvider'."""
    r = no_torch("--mode", "action", "--model-dir", EXAMPLES / "vector", "--device", "cpu", "--providers", "cuda")
    if r.returncode == 0:
        pytest.skip("this onnxruntime has CUDA")
    assert r.returncode == 2 and r.stderr.startswith("error: --providers: this onnxruntime has no CUDAExecutionProvider"), r.stderr


def test_a_negative_seed_samples_as_with_torch():
    """act(seed=-1) is within what act() takes (torch's manual_seed maps it); numpy's PCG64 raised ValueError."""
    got = no_torch_code("""
import json, numpy as np, inference
p = inference.load(%r)
a, b = (p.act(np.zeros(8, np.float32), deterministic=False, seed=-1)["continuous_actions"] for _ in range(2))
c = p.act(np.zeros(8, np.float32), deterministic=False, seed=-2**63)["continuous_actions"]
print(json.dumps([a.tolist(), b.tolist(), c.tolist()]))
""" % str(EXAMPLES / "vector"))
    assert got[0] == got[1] != got[2]


def test_ray_actors_load_the_policy_on_the_providers_named():
    """batch --ray: each PolicyActor loaded the policy without --providers (Ray's actors ran on the device's default
    provider, or the CPU, whatever --providers said). Checked without Ray: what an actor is given, and what it loads."""
    got = no_torch_code("""
import json
from mlagents_inference.fronts.cli import parse_args
from mlagents_inference.services.context import Context
from mlagents_inference.fronts.batch import PolicyActor
from mlagents_inference.services.ray_support import ray_model
ctx = Context(parse_args(["--mode", "batch", "--model-dir", %r, "--obs-file", "x.parquet", "--ray", "local",
                          "--providers", "CPUExecutionProvider", "--device", "cpu"]))
model = ray_model(ctx)
print(json.dumps([model["providers"], PolicyActor(model, None, 8, "order").policy.info["providers"]]))
""" % str(EXAMPLES / "vector"))
    assert got == [["CPUExecutionProvider"], ["CPUExecutionProvider"]]


def test_an_empty_providers_list_is_refused_as_the_apis_argument():
    """load(providers=[]) said "--providers: unknown execution provider ''" (an option the caller never gave)."""
    got = no_torch_code("""
import json, inference
try:
    inference.load(%r, providers=[])
except inference.UsageError as exc:
    print(json.dumps(str(exc)))
""" % str(EXAMPLES / "vector"))
    assert got.startswith("providers []: expected a list of provider names")


def test_auto_takes_the_cpu_where_a_gpu_wheel_meets_no_gpu(monkeypatch):
    """onnxruntime-gpu on a host without a GPU: --device auto (the default) took CUDA, whose provider cannot start, and
    every command ended 'onnxruntime could not start CUDAExecutionProvider'; auto is the CPU there."""
    from mlagents_inference.engines import devices as runtime

    class FakeOrt:
        @staticmethod
        def get_available_providers():
            return ["CUDAExecutionProvider", "CANNExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(runtime, "import_onnxruntime", lambda: FakeOrt)
    monkeypatch.setattr(runtime, "host_has_device", lambda kind: False)
    assert runtime.ort_device("auto") == runtime.OrtDevice("cpu")
    monkeypatch.setattr(runtime, "host_has_device", lambda kind: kind == "cuda")
    assert runtime.ort_device("auto") == runtime.OrtDevice("cuda", 0)
    assert str(runtime.ort_device("npu:1")) == "npu:1"  # (named: as asked; a provider that cannot start is refused)
    monkeypatch.undo()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert runtime.host_has_device("cuda") is False


@pytest.mark.parametrize("source", [["--model-dir", EXAMPLES / "vector"], ["--onnx", EXAMPLES / "onnx-interfaces" / "Hybrid-2x.onnx"]])
def test_sample_shows_the_files_sigma(source):
    """--mode sample showed sigma from the checkpoint's modules alone: without torch its "sigma" was missing."""
    r = no_torch("--mode", "sample", *source, "--json")
    assert r.returncode == 0, r.stderr
    sigma = json.loads(r.stdout)["sigma"]
    log_sigma = json.loads(no_torch("--mode", "info", *source, "--json").stdout)["log_sigma"]
    assert np.allclose(np.log(sigma), log_sigma, atol=1e-6)
    if TORCH:
        theirs = json.loads(with_torch("--mode", "sample", *source, "--json", "--engine", "onnxruntime").stdout)["sigma"]
        assert np.allclose(sigma, theirs, atol=1e-6)
