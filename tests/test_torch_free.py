"""The torch-free install (issue 25): every mode that a policy's ML-Agents ONNX can serve runs on onnxruntime with
the file itself, torch never imported (tests/no_torch.py makes it unimportable, as `pip install .` alone leaves it).

Two oracles: where torch is installed, the torch install's own answers (--engine onnxruntime: ML-Agents' modules
rebuilt and exported); everywhere (CI's torch-free leg too), a bare onnxruntime session on the same ML-Agents file."""
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import BUNDLED, EXAMPLES, FIXTURES, ROOT, call, child_env

TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = ROOT / "tests" / "no_torch.py"
FOLDERS = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and p.name != "onnx-interfaces")
INTERFACES = sorted(p.name for p in (EXAMPLES / "onnx-interfaces").glob("*.onnx"))
TRAINED = ["3DBallHard", "DungeonEscape", "SoccerTwos"]
needs_torch = pytest.mark.skipif(not TORCH, reason="the torch install's answers are the oracle")


def no_torch(*args, input=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(NO_TORCH), *map(str, args)], input=input, capture_output=True, text=True,
                          timeout=timeout, env=child_env())


def no_torch_code(code: str, timeout=300):
    """Run Python code with torch unimportable; its last stdout line as JSON."""
    r = no_torch("--code", code, timeout=timeout)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def source_args(case: str) -> list:
    if case in FOLDERS:
        return ["--model-dir", EXAMPLES / case]
    if case in INTERFACES:
        return ["--onnx", EXAMPLES / "onnx-interfaces" / case]
    if case in TRAINED:
        path = FIXTURES / "trained" / case / f"{case}.onnx"
        if not path.is_file():
            pytest.skip(f"{path} is absent (development fixtures)")
        return ["--onnx", path]
    return []  # the bundled sample


CASES = FOLDERS + INTERFACES + TRAINED + ["bundled"]


@pytest.fixture(scope="module")
def torch_free_actions():
    """`--mode action --obs random|ones --seed 0 --json` for every case, all in one torch-free process."""
    runs = {f"{case}/{obs}": [str(a) for a in source_args(case)] + ["--obs", obs]
            for case in CASES for obs in ("random", "ones")
            if case not in TRAINED or (FIXTURES / "trained" / case / f"{case}.onnx").is_file()}
    code = f"""
import contextlib, io, json, sys
import inference
out = {{}}
for key, args in {runs!r}.items():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = inference.main(["--mode", "action", "--seed", "0", "--json", *args])
    out[key] = json.loads(buffer.getvalue().strip().splitlines()[-1]) if code == 0 else {{"exit": code}}
assert "torch" not in sys.modules or sys.modules["torch"] is None
print(json.dumps(out))
"""
    return no_torch_code(code, timeout=600)


def close(a, b, tol=1e-5) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= tol * np.maximum(1.0, np.abs(b))))


@needs_torch
@pytest.mark.parametrize("case", CASES)
def test_actions_equal_the_torch_installs(case, torch_free_actions, capsys):
    for obs in ("random", "ones"):
        key = f"{case}/{obs}"
        if key not in torch_free_actions:
            pytest.skip("absent fixture")
        mine = torch_free_actions[key]
        assert "exit" not in mine, (key, mine)
        code, theirs, err = call(capsys, "--mode", "action", "--seed", "0", "--obs", obs, "--engine", "onnxruntime",
                                 *source_args(case))
        assert code == 0, err
        assert mine["obs"] == theirs["obs"]
        if "continuous_actions" in theirs:
            assert close(mine["continuous_actions"], theirs["continuous_actions"]), (key, mine, theirs)
        if theirs.get("discrete_actions") is not None:
            assert mine["discrete_actions"] == theirs["discrete_actions"], key
        assert mine["engine"] == "onnxruntime" and mine["checkpoint"].endswith(".onnx")


@pytest.mark.parametrize("case", [c for c in FOLDERS if (EXAMPLES / c / "generated.json").is_file()])
def test_actions_equal_a_bare_session_on_the_file(case, torch_free_actions):
    """Every input ones, every action allowed, memory zeros: the file's own deterministic outputs."""
    import onnxruntime as ort
    mine = torch_free_actions[f"{case}/ones"]
    path = next(EXAMPLES.joinpath(case).glob("*.onnx"))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {}
    for i in session.get_inputs():
        shape = [1] + [d for d in i.shape[1:]]
        feed[i.name] = np.zeros(shape, np.float32) if i.name == "recurrent_in" else np.ones(shape, np.float32)
    names = [o.name for o in session.get_outputs() if o.name.startswith("deterministic_")]
    want = dict(zip(names, session.run(names, feed)))
    if "deterministic_continuous_actions" in want:
        assert close(mine["continuous_actions"], want["deterministic_continuous_actions"][0])
    if "deterministic_discrete_actions" in want:
        assert mine["discrete_actions"] == want["deterministic_discrete_actions"][0].astype(int).tolist()


ROLLOUT = """
import json, numpy as np, inference
p = inference.load({path!r}{extra})
rng = np.random.RandomState(3)
memory, out = None, []
for step in range(20):
    obs = [rng.randn(5, *i["shape"]).astype(np.float32) for i in p.info["inputs"]]
    a = p.act(obs, memory=memory)
    memory = a["memory"]
    out.append({{k: v.tolist() for k, v in a.items()}})
print(json.dumps({{"steps": out, "engine": p.info["runs"]}}))
"""


@needs_torch
@pytest.mark.parametrize("case", ["lstm", "lstm-camera-nonsquare"])
def test_memory_rollouts_equal_the_torch_installs(case):
    path = str(EXAMPLES / case)
    mine = no_torch_code(ROLLOUT.format(path=path, extra=""))
    theirs = json.loads(subprocess.run([sys.executable, "-c", ROLLOUT.format(path=path, extra=", engine='onnxruntime'")],
                                       capture_output=True, text=True, cwd=ROOT, env=child_env(PYTHONPATH=str(ROOT)),
                                       check=True, timeout=300).stdout.splitlines()[-1])
    assert mine["engine"] == "ML-Agents' ONNX file" and theirs["engine"] == "ML-Agents' modules"
    for a, b in zip(mine["steps"], theirs["steps"]):
        assert close(a["memory"], b["memory"])
        assert a["discrete_actions"] == b["discrete_actions"]


GET_ACTION = """
import json, sys, numpy as np
sys.path.insert(0, {tests!r})
import api_standins as s, inference
p = inference.load({path!r}{extra})
example = __import__("pathlib").Path({path!r})
spec = s.behavior_spec(example)
p.check_spec(spec)
rng = np.random.RandomState(0)
out = []
for step in range(6):
    ids = [0, 1, 2] if step < 3 else [1, 2, 7]
    obs = [s.observation(rng, o.shape, len(ids)) for o in spec.observation_specs]
    mask = s.mlagents_mask(rng, len(ids), spec.action_spec.discrete_branches)
    ended = s.terminal_steps([o[:1] for o in obs], [0]) if step == 3 else None
    a = p.get_action(s.decision_steps(obs, ids, mask), ended)
    out.append([a.continuous.tolist(), a.discrete.tolist(), str(a.discrete.dtype), str(a.continuous.dtype)])
print(json.dumps({{"out": out, "real": s.REAL_MLAGENTS}}))
"""


@needs_torch
@pytest.mark.parametrize("case", ["lstm", "hybrid"])
def test_get_action_equals_the_torch_installs(case):
    """mlagents_envs' DecisionSteps and TerminalSteps (its real classes where installed: CI's second leg), memory per agent id."""
    code = GET_ACTION.format(tests=str(ROOT / "tests"), path=str(EXAMPLES / case), extra="")
    mine = no_torch_code(code)
    theirs = json.loads(subprocess.run([sys.executable, "-c", GET_ACTION.format(tests=str(ROOT / "tests"), path=str(EXAMPLES / case),
                                                                               extra=", engine='onnxruntime'")],
                                       capture_output=True, text=True, cwd=ROOT, env=child_env(PYTHONPATH=str(ROOT)),
                                       check=True, timeout=300).stdout.splitlines()[-1])
    for a, b in zip(mine["out"], theirs["out"]):
        assert close(a[0], b[0]) and a[1] == b[1] and a[2:] == b[2:] == ["int32", "float32"]


SAMPLES = """
import json, numpy as np, inference
p = inference.load({path!r}{extra})
obs = [np.repeat(np.random.RandomState(1).randn(1, *i["shape"]).astype(np.float32), 4000, 0) for i in p.info["inputs"]]
a = p.act(obs, deterministic=False, seed=5)
b = p.act(obs, deterministic=False, seed=5)
c = p.act(obs, deterministic=False, seed=6)
print(json.dumps({{k: [v.tolist(), bool(np.array_equal(v, b[k])), bool(np.array_equal(v, c[k]))] for k, v in a.items()}}))
"""


@needs_torch
@pytest.mark.parametrize("case", ["vector", "sac-continuous", "discrete-multi", "hybrid"])
def test_samples_reproduce_and_match_the_torch_installs_distribution(case):
    """4,000 draws for one observation: a seed reproduces, another differs; means and standard deviations (continuous)
    and each action's frequency (discrete) agree with the torch install's within sampling error."""
    path = str(EXAMPLES / case)
    mine = no_torch_code(SAMPLES.format(path=path, extra=""))
    theirs = json.loads(subprocess.run([sys.executable, "-c", SAMPLES.format(path=path, extra=", engine='onnxruntime'")],
                                       capture_output=True, text=True, cwd=ROOT, env=child_env(PYTHONPATH=str(ROOT)),
                                       check=True, timeout=300).stdout.splitlines()[-1])
    for key in mine:
        a, same, other = mine[key]
        assert same and not other, key
        a, b = np.asarray(a, np.float64), np.asarray(theirs[key][0], np.float64)
        n = len(a)
        if key == "continuous_actions":
            if case == "sac-continuous":  # tanh(mu + sigma z): compared where it is Gaussian
                a, b = (np.arctanh(np.clip(x, -1 + 1e-6, 1 - 1e-6)) for x in (a, b))
            sa, sb = a.std(axis=0), b.std(axis=0)
            # standard errors of the standard deviations from each sample's fourth moment (clipped tails have their own)
            se = [np.sqrt(np.maximum(((x - x.mean(0)) ** 4).mean(0) - sx ** 4, 0) / n) / (2 * sx) for x, sx in ((a, sa), (b, sb))]
            assert np.all(np.abs(a.mean(0) - b.mean(0)) <= 5 * np.sqrt((sa ** 2 + sb ** 2) / n) + 1e-6), key
            assert np.all(np.abs(sa - sb) <= 5 * np.sqrt(se[0] ** 2 + se[1] ** 2) + 1e-6), (key, sa, sb)
            assert sa.min() > 0
        else:
            for branch in range(a.shape[1]):
                values = np.union1d(a[:, branch], b[:, branch])
                for v in values:
                    pa, pb = np.mean(a[:, branch] == v), np.mean(b[:, branch] == v)
                    p = (pa + pb) / 2
                    assert abs(pa - pb) <= 5 * np.sqrt(2 * p * (1 - p) / n) + 1e-3, (key, branch, v, pa, pb)


def test_sampling_masks_and_sigma_come_from_the_file():
    """A forbidden action is never drawn; SAC's samples stay in (-1, 1), PPO's in [-1, 1]; the spread is the file's own
    sigma (mu +/- sigma*z, clipped): checked against mu and sigma read out of the file by a bare session."""
    out = no_torch_code("""
import json, numpy as np, inference
p = inference.load("examples/discrete-multi")
mask = np.ones(sum(p.settings.discrete_branches), np.float32); mask[0] = 0; mask[1] = 0
a = p.act([np.zeros((2000, *i["shape"]), np.float32) for i in p.info["inputs"]], action_masks=np.repeat(mask[None], 2000, 0),
          deterministic=False, seed=0)["discrete_actions"]
v = inference.load("examples/vector")
z = v.act(np.zeros((20000, 8), np.float32), deterministic=False, seed=1)["continuous_actions"]
d = v.act(np.zeros(8, np.float32))["continuous_actions"]
print(json.dumps({"first": int((a[:, 0] < 2).sum()), "std": z.std(0).tolist(), "mean": z.mean(0).tolist(), "det": d.tolist()}))
""".replace("examples/", str(EXAMPLES) + "/"))
    assert out["first"] == 0
    import onnx
    import onnxruntime as ort
    model = onnx.load(str(EXAMPLES / "vector" / "Vector.onnx"))
    draw = next(n for n in model.graph.node if n.op_type == "RandomNormalLike")
    mul = next(n for n in model.graph.node if n.op_type == "Mul" and draw.output[0] in n.input)
    sigma_name = next(i for i in mul.input if i != draw.output[0])
    model.graph.output.append(onnx.helper.make_tensor_value_info(sigma_name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sigma = session.run([sigma_name], {"obs_0": np.zeros((1, 8), np.float32)})[0][0]
    mu = np.asarray(out["det"]) * 3  # (unclipped here: |mu| < 3)
    # clip(mu + sigma z, -3, 3) / 3: for these sigmas (about 0.6) the clip is rarely reached
    assert np.allclose(np.asarray(out["std"]) * 3, sigma, rtol=0.05)
    assert np.allclose(np.asarray(out["mean"]) * 3, mu, atol=0.05)


@pytest.mark.parametrize("args, wanted", [
    (["--mode", "export-onnx"], 'pip install ".[torch]"'),
    (["--mode", "precision"], 'pip install ".[torch]"'),
    (["--mode", "onnx-compare"], 'pip install ".[torch]"'),
    (["--mode", "action", "--engine", "torch"], 'pip install ".[torch]"'),
    (["--mode", "action", "--dtype", "float16"], 'pip install ".[torch]"'),
    (["--mode", "action", "--checkpoint", "LONE"], 'pip install ".[torch]"'),
    (["--mode", "action", "--device", "cuda"], "onnxruntime-gpu"),
    (["--mode", "action", "--device", "npu:1"], "onnxruntime-cann"),
    (["--mode", "action", "--providers", "tensorrt,cuda"], "onnxruntime-gpu"),
    (["--mode", "action", "--providers", "openvino"], "onnxruntime-openvino"),
    (["--mode", "action", "--providers", "warp-drive"], "unknown execution provider"),
])
def test_what_needs_torch_or_a_provider_says_what_to_install(args, wanted, tmp_path):
    if "LONE" in args:  # a checkpoint with no ML-Agents ONNX beside it
        import shutil
        (tmp_path / "Vector").mkdir()
        args = [str(shutil.copy(EXAMPLES / "vector" / "Vector" / "Vector-100000.pt", tmp_path / "Vector")) if a == "LONE" else a
                for a in args]
    r = no_torch(*args, "--model-dir", EXAMPLES / "vector") if "--checkpoint" not in args else no_torch(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert wanted in r.stderr, r.stderr


def test_the_checkpoints_own_onnx_is_used_beside_it():
    """--checkpoint X-N.pt with its ML-Agents ONNX beside it runs that file (without torch a .pt cannot be read)."""
    r = no_torch("--mode", "action", "--checkpoint", EXAMPLES / "vector" / "Vector" / "Vector-50000.pt", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["checkpoint"].endswith("Vector-50000.onnx")


@pytest.mark.parametrize("mode, extra", [
    ("info", []), ("checkpoints", []), ("sample", []), ("fingerprint", ["--steps", "8"]),
    ("stats", ["--rollouts", "2", "--steps", "5"]), ("benchmark", ["--runs", "20"]), ("batch", ["--batch", "4"]),
])
def test_every_mode_that_the_file_serves_runs(mode, extra, tmp_path):
    out = ["--output", tmp_path / "a.npz"] if mode == "batch" else []
    r = no_torch("--mode", mode, "--model-dir", EXAMPLES / "hybrid", "--json", *extra, *out)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["passed"] is True
    if mode == "info":
        assert result["versions"]["torch"] is None and result["providers"] == ["CPUExecutionProvider"]
        assert result["runs"] == "ML-Agents' ONNX file"


@needs_torch
def test_the_stream_answers_as_the_torch_installs():
    lines = "".join(json.dumps(line) + "\n" for line in [
        {"id": 1, "obs": [0.1] * 10}, {"id": 1, "obs": [0.2] * 10}, {"id": 2, "obs": [[0.3] * 10, [0.4] * 10]},
        {"id": 1, "obs": [0.5] * 10, "reset": True}, {"obs": [1] * 9}, {"id": "x", "obs": [0.1] * 10, "action_masks": [1, 0, 1, 1]},
        {"id": 3, "obs": [0.2] * 10, "stochastic": True, "seed": 4}])
    mine = no_torch("--mode", "stream", "--model-dir", EXAMPLES / "lstm", input=lines)
    theirs = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--engine", "onnxruntime",
                             "--model-dir", str(EXAMPLES / "lstm")], input=lines, capture_output=True, text=True,
                            env=child_env(), timeout=300)
    assert mine.returncode == theirs.returncode == 0, mine.stderr
    for a, b in zip(mine.stdout.splitlines(), theirs.stdout.splitlines(), strict=True):
        a, b = json.loads(a), json.loads(b)
        assert a.keys() == b.keys() and a.get("error") == b.get("error")
        if "memory" in a and "stochastic" not in a:
            assert close(a["memory"], b["memory"])
    assert [json.loads(x).get("discrete_actions") for x in mine.stdout.splitlines()[:6]] == \
        [json.loads(x).get("discrete_actions") for x in theirs.stdout.splitlines()[:6]]


def test_the_device_and_providers_logic(monkeypatch):
    """Without hardware: the providers a device and --providers ask for, in order, the device index where it goes."""
    from mlagents_inference.engines import devices as runtime

    class FakeOrt:
        @staticmethod
        def get_available_providers():
            return ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CANNExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(runtime, "import_onnxruntime", lambda: FakeOrt)
    monkeypatch.setattr(runtime, "host_has_device", lambda kind: True)  # (the host's devices: tests/test_torch_free_hostile.py)
    assert runtime.ort_device("auto") == runtime.OrtDevice("npu", 0)
    assert str(runtime.ort_device("cuda:1")) == "cuda:1" and str(runtime.ort_device("cpu")) == "cpu"
    assert runtime.session_providers(runtime.OrtDevice("cuda", 1)) == [("CUDAExecutionProvider", {"device_id": "1"}), "CPUExecutionProvider"]
    assert runtime.session_providers(runtime.OrtDevice("npu", 0)) == [("CANNExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"]
    assert runtime.session_providers(runtime.OrtDevice("cuda", 0), runtime.parse_providers("tensorrt,CUDAExecutionProvider")) == \
        [("TensorrtExecutionProvider", {"device_id": "0"}), ("CUDAExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"]
    assert runtime.session_providers(None, ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    with pytest.raises(runtime.UsageError, match="onnxruntime-openvino"):
        runtime.session_providers(None, runtime.parse_providers("openvino"))
    with pytest.raises(runtime.UsageError, match="twice"):
        runtime.parse_providers("cuda,CUDAExecutionProvider")
    monkeypatch.setattr(FakeOrt, "get_available_providers", staticmethod(lambda: ["CPUExecutionProvider"]))
    assert runtime.ort_device("auto") == runtime.OrtDevice("cpu")


def test_a_provider_that_falls_back_is_refused(monkeypatch):
    """onnxruntime runs on the CPU when a provider cannot start (a driver missing): that is refused, not hidden."""
    from mlagents_inference.engines import devices as runtime

    class Session:
        def __init__(self, *a, **k):
            pass

        def get_providers(self):
            return ["CPUExecutionProvider"]
    import onnxruntime
    monkeypatch.setattr(onnxruntime, "InferenceSession", Session)
    from mlagents_inference.core import sessions
    with pytest.raises(runtime.UsageError, match="could not start CUDAExecutionProvider"):
        sessions.onnx_session(b"model", providers=[("CUDAExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"])


@needs_torch
def test_with_torch_the_onnxruntime_engine_takes_providers(capsys):
    code, out, err = call(capsys, "--mode", "info", "--engine", "onnxruntime", "--providers", "cpu", "--model-dir", EXAMPLES / "vector")
    assert code == 0 and out["providers"] == ["CPUExecutionProvider"] and out["runs"] == "ML-Agents' modules", err
    code, out, err = call(capsys, "--mode", "action", "--engine", "torch", "--providers", "cpu", "--model-dir", EXAMPLES / "vector")
    assert code == 2 and "--providers applies to --engine onnxruntime" in err


def test_the_bundled_default_runs_without_torch():
    r = no_torch("--mode", "info", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["checkpoint"].startswith(str(BUNDLED))


def test_serve_and_connect_run_without_torch(tmp_path):
    """--mode serve on the ML-Agents file, torch unimportable; inference.connect() to it answers as load() does there."""
    import select
    import time
    where = tmp_path / "policy.sock"
    proc = subprocess.Popen([sys.executable, str(NO_TORCH), "--mode", "serve", "--model-dir", str(EXAMPLES / "lstm"),
                             "--listen", f"unix:{where}"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env())
    try:
        text, deadline = b"", time.monotonic() + 120
        while b"listening on" not in text:
            assert proc.poll() is None and time.monotonic() < deadline, text
            if select.select([proc.stderr], [], [], 1)[0]:
                text += proc.stderr.read1(4096)
        mine = no_torch_code(f"""
import json, numpy as np, inference
remote, local = inference.connect("unix:{where}"), inference.load({str(EXAMPLES / "lstm")!r})
obs = np.random.RandomState(0).randn(3, 10).astype(np.float32)
a, b = remote.act(obs), local.act(obs)
print(json.dumps({{"same": bool(np.array_equal(a["discrete_actions"], b["discrete_actions"]) and
                   np.allclose(a["memory"], b["memory"], atol=1e-6)), "runs": local.info["runs"]}}))
""")
        assert mine == {"same": True, "runs": "ML-Agents' ONNX file"}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
