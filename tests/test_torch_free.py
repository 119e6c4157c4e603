"""The torch-free install (issue 25): every mode that a policy's ML-Agents ONNX can serve runs on onnxruntime with
the file itself, torch never imported (tests/no_torch.py makes it unimportable, as `pip install .` alone leaves it):
batch, sample and info as the torch install shows them, --onnx beside a run folder, Unity's 1.x files in their run
folders (the checkpoint's inputs), which option a missing provider is blamed on; what needs torch says in one line
what to install.

Two oracles: where torch is installed, the torch install's own answers (--engine onnxruntime: ML-Agents' modules
rebuilt and exported); everywhere (CI's torch-free leg too), a bare onnxruntime session on the same ML-Agents file."""

import contextlib
import importlib.util
import io
import json
import select
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from conftest import BUNDLED, EXAMPLES, ROOT, TRAINED, call, child_env, refused, run, serve_process

TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = ROOT / "tests" / "no_torch.py"
FOLDERS = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and p.name not in ("onnx-interfaces", "trained"))
INTERFACES = sorted(p.name for p in (EXAMPLES / "onnx-interfaces").glob("*.onnx"))
UNITY_TRAINED = ["3DBallHard", "DungeonEscape", "SoccerTwos"]  # examples/trained/
needs_torch = pytest.mark.skipif(not TORCH, reason="the torch install's answers are the oracle")


class TorchFree:
    """One interpreter where torch cannot be imported (tests/no_torch.py --requests) for this module's requests: the
    command line or Python code, each answered with what it wrote to file descriptors 1 and 2 and its exit code, as a
    process of its own would be (a process start each cost more than most requests). Started again after a request
    that kills it or runs past its time; every answer says torch was not imported."""

    def __init__(self):
        self.proc = self.log = None

    def ask(self, request: dict, timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(
                [sys.executable, str(NO_TORCH), "--requests"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                text=True,
                env=child_env(),
            )
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline() if select.select([self.proc.stdout], [], [], timeout)[0] else ""
        if not line:
            self.close()
            self.log.seek(0)
            raise AssertionError(
                f"the torch-free interpreter died or took more than {timeout} s on {request}: "
                f"{self.log.read().decode(errors='replace')[-2000:]}"
            )
        answer = json.loads(line)
        assert not answer["torch_imported"], f"torch was imported by {request}"
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


TORCH_FREE = TorchFree()


@pytest.fixture(scope="module", autouse=True)
def torch_free_interpreter():
    yield TORCH_FREE
    TORCH_FREE.close()


def no_torch(*args, input=None, timeout=300) -> subprocess.CompletedProcess:
    """The command line, torch unimportable: as `python tests/no_torch.py ARGS` would end."""
    argv = [str(a) for a in args]
    answer = TORCH_FREE.ask({"argv": argv, "stdin": input}, timeout)
    return subprocess.CompletedProcess(argv, answer["code"], answer["out"], answer["err"])


def no_torch_code(code: str, timeout=300):
    """Run Python code with torch unimportable; its last stdout line as JSON."""
    answer = TORCH_FREE.ask({"code": code}, timeout)
    assert answer["code"] == 0, answer["err"][-2000:]
    return json.loads(answer["out"].strip().splitlines()[-1])


def with_torch(capsys, *args) -> subprocess.CompletedProcess:
    """The same command line in this process, where torch is installed (the oracle), as a finished process."""
    code, out, err = run(capsys, *args)
    return subprocess.CompletedProcess([str(a) for a in args], code, out, err)


def torch_install_code(code: str):
    """The same Python code run in this process, where torch is installed: its last stdout line as JSON."""
    out, path = io.StringIO(), list(sys.path)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<code>", "exec"), {"__name__": "__main__"})
    finally:
        sys.path[:] = path
    return json.loads(out.getvalue().strip().splitlines()[-1])


def source_args(case: str) -> list:
    if case in FOLDERS:
        return ["--model-dir", EXAMPLES / case]
    if case in INTERFACES:
        return ["--onnx", EXAMPLES / "onnx-interfaces" / case]
    if case in UNITY_TRAINED:
        return ["--onnx", TRAINED / case / f"{case}.onnx"]
    return []  # the bundled sample


CASES = FOLDERS + INTERFACES + UNITY_TRAINED + ["bundled"]


@pytest.fixture(scope="module")
def torch_free_actions():
    """`--mode action --obs random|ones --seed 0 --json` for every case, all in one torch-free process."""
    runs = {
        f"{case}/{obs}": [str(a) for a in source_args(case)] + ["--obs", obs]
        for case in CASES
        for obs in ("random", "ones")
    }
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
        mine = torch_free_actions[key]
        assert "exit" not in mine, (key, mine)
        code, theirs, err = call(
            capsys, "--mode", "action", "--seed", "0", "--obs", obs, "--engine", "onnxruntime", *source_args(case)
        )
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
    theirs = torch_install_code(ROLLOUT.format(path=path, extra=", engine='onnxruntime'"))
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
    """mlagents_envs' DecisionSteps and TerminalSteps (its real classes where installed: CI's second leg), memory per
    agent id."""
    code = GET_ACTION.format(tests=str(ROOT / "tests"), path=str(EXAMPLES / case), extra="")
    mine = no_torch_code(code)
    theirs = torch_install_code(
        GET_ACTION.format(tests=str(ROOT / "tests"), path=str(EXAMPLES / case), extra=", engine='onnxruntime'")
    )
    for a, b in zip(mine["out"], theirs["out"]):
        assert close(a[0], b[0]) and a[1] == b[1] and a[2:] == b[2:] == ["int32", "float32"]


SAMPLES = """
import json, numpy as np, inference
p = inference.load({path!r}{extra})
obs = [np.repeat(np.random.RandomState(1).randn(1, *i["shape"]).astype(np.float32), 4000, 0) for i in p.info["inputs"]]
a = p.act(obs, deterministic=False, seed=5)
b = p.act(obs, deterministic=False, seed=5)
c = p.act(obs, deterministic=False, seed=6)
print(json.dumps({{k: [v.tolist(), bool(np.array_equal(v, b[k])), bool(np.array_equal(v, c[k]))] for k, v in
a.items()}}))
"""


@needs_torch
@pytest.mark.parametrize("case", ["vector", "sac-continuous", "discrete-multi", "hybrid"])
def test_samples_reproduce_and_match_the_torch_installs_distribution(case):
    """4,000 draws for one observation: a seed reproduces, another differs; means and standard deviations (continuous)
    and each action's frequency (discrete) agree with the torch install's within sampling error."""
    path = str(EXAMPLES / case)
    mine = no_torch_code(SAMPLES.format(path=path, extra=""))
    theirs = torch_install_code(SAMPLES.format(path=path, extra=", engine='onnxruntime'"))
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
            se = [
                np.sqrt(np.maximum(((x - x.mean(0)) ** 4).mean(0) - sx**4, 0) / n) / (2 * sx)
                for x, sx in ((a, sa), (b, sb))
            ]
            assert np.all(np.abs(a.mean(0) - b.mean(0)) <= 5 * np.sqrt((sa**2 + sb**2) / n) + 1e-6), key
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
    out = no_torch_code(
        """
import json, numpy as np, inference
p = inference.load("examples/discrete-multi")
mask = np.ones(sum(p.settings.discrete_branches), np.float32); mask[0] = 0; mask[1] = 0
obs = [np.zeros((2000, *i["shape"]), np.float32) for i in p.info["inputs"]]
a = p.act(obs, action_masks=np.repeat(mask[None], 2000, 0), deterministic=False, seed=0)["discrete_actions"]
v = inference.load("examples/vector")
z = v.act(np.zeros((20000, 8), np.float32), deterministic=False, seed=1)["continuous_actions"]
d = v.act(np.zeros(8, np.float32))["continuous_actions"]
print(json.dumps({"first": int((a[:, 0] < 2).sum()), "std": z.std(0).tolist(), "mean": z.mean(0).tolist(), "det":
d.tolist()}))
""".replace("examples/", str(EXAMPLES) + "/")
    )
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


@pytest.mark.parametrize(
    "args, wanted",
    [
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
    ],
)
def test_what_needs_torch_or_a_provider_says_what_to_install(args, wanted, tmp_path):
    if "LONE" in args:  # a checkpoint with no ML-Agents ONNX beside it
        import shutil

        (tmp_path / "Vector").mkdir()
        args = [
            str(shutil.copy(EXAMPLES / "vector" / "Vector" / "Vector-100000.pt", tmp_path / "Vector"))
            if a == "LONE"
            else a
            for a in args
        ]
    r = no_torch(*args, "--model-dir", EXAMPLES / "vector") if "--checkpoint" not in args else no_torch(*args)
    refused(r, wanted)


def test_the_checkpoints_own_onnx_is_used_beside_it():
    """--checkpoint X-N.pt with its ML-Agents ONNX beside it runs that file (without torch a .pt cannot be read)."""
    r = no_torch("--mode", "action", "--checkpoint", EXAMPLES / "vector" / "Vector" / "Vector-50000.pt", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["checkpoint"].endswith("Vector-50000.onnx")


@pytest.mark.parametrize(
    "mode, extra",
    [
        ("info", []),
        ("checkpoints", []),
        ("sample", []),
        ("fingerprint", ["--steps", "8"]),
        ("stats", ["--rollouts", "2", "--steps", "5"]),
        ("benchmark", ["--runs", "20"]),
        ("batch", ["--batch", "4"]),
    ],
)
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
def test_the_stream_answers_as_the_torch_installs(capsys):
    lines = "".join(
        json.dumps(line) + "\n"
        for line in [
            {"id": 1, "obs": [0.1] * 10},
            {"id": 1, "obs": [0.2] * 10},
            {"id": 2, "obs": [[0.3] * 10, [0.4] * 10]},
            {"id": 1, "obs": [0.5] * 10, "reset": True},
            {"obs": [1] * 9},
            {"id": "x", "obs": [0.1] * 10, "action_masks": [1, 0, 1, 1]},
            {"id": 3, "obs": [0.2] * 10, "stochastic": True, "seed": 4},
        ]
    )
    mine = no_torch("--mode", "stream", "--model-dir", EXAMPLES / "lstm", input=lines)
    code, out, err = run(
        capsys, "--mode", "stream", "--engine", "onnxruntime", "--model-dir", EXAMPLES / "lstm", stdin=lines
    )
    theirs = subprocess.CompletedProcess("stream", code, out, err)
    assert mine.returncode == theirs.returncode == 0, mine.stderr
    for a, b in zip(mine.stdout.splitlines(), theirs.stdout.splitlines(), strict=True):
        a, b = json.loads(a), json.loads(b)
        assert a.keys() == b.keys() and a.get("error") == b.get("error")
        if "memory" in a and "stochastic" not in a:
            assert close(a["memory"], b["memory"])
    assert [json.loads(x).get("discrete_actions") for x in mine.stdout.splitlines()[:6]] == [
        json.loads(x).get("discrete_actions") for x in theirs.stdout.splitlines()[:6]
    ]


def test_the_device_and_providers_logic(monkeypatch):
    """Without hardware: the providers a device and --providers ask for, in order, the device index where it goes."""
    from mlagents_inference.engines import devices as runtime

    class FakeOrt:
        @staticmethod
        def get_available_providers():
            return [
                "TensorrtExecutionProvider",
                "CUDAExecutionProvider",
                "CANNExecutionProvider",
                "CPUExecutionProvider",
            ]

    monkeypatch.setattr(runtime, "import_onnxruntime", lambda: FakeOrt)
    monkeypatch.setattr(
        runtime, "host_has_device", lambda kind: True
    )  # (the host's devices: test_auto_takes_the_cpu_where_a_gpu_wheel_meets_no_gpu)
    assert runtime.ort_device("auto") == runtime.OrtDevice("npu", 0)
    assert str(runtime.ort_device("cuda:1")) == "cuda:1" and str(runtime.ort_device("cpu")) == "cpu"
    assert runtime.session_providers(runtime.OrtDevice("cuda", 1)) == [
        ("CUDAExecutionProvider", {"device_id": "1"}),
        "CPUExecutionProvider",
    ]
    assert runtime.session_providers(runtime.OrtDevice("npu", 0)) == [
        ("CANNExecutionProvider", {"device_id": "0"}),
        "CPUExecutionProvider",
    ]
    assert runtime.session_providers(
        runtime.OrtDevice("cuda", 0), runtime.parse_providers("tensorrt,CUDAExecutionProvider")
    ) == [
        ("TensorrtExecutionProvider", {"device_id": "0"}),
        ("CUDAExecutionProvider", {"device_id": "0"}),
        "CPUExecutionProvider",
    ]
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
        sessions.onnx_session(
            b"model", providers=[("CUDAExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"]
        )


@needs_torch
def test_with_torch_the_onnxruntime_engine_takes_providers(capsys):
    code, out, err = call(
        capsys, "--mode", "info", "--engine", "onnxruntime", "--providers", "cpu", "--model-dir", EXAMPLES / "vector"
    )
    assert code == 0 and out["providers"] == ["CPUExecutionProvider"] and out["runs"] == "ML-Agents' modules", err
    code, out, err = call(
        capsys, "--mode", "action", "--engine", "torch", "--providers", "cpu", "--model-dir", EXAMPLES / "vector"
    )
    refused((code, out, err), "--providers applies to --engine onnxruntime")


def test_the_bundled_default_runs_without_torch():
    r = no_torch("--mode", "info", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["checkpoint"].startswith(str(BUNDLED))


def test_serve_and_connect_run_without_torch(tmp_path):
    """--mode serve on the ML-Agents file, torch unimportable; inference.connect() to it answers as load() does
    there."""

    where = tmp_path / "policy.sock"
    proc, _, _ = serve_process("--model-dir", EXAMPLES / "lstm", "--listen", f"unix:{where}", program=NO_TORCH)
    try:
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


# --- pushed further: run folders, 1.x files, info's fields, providers, what needs torch ---------------------


def trained(name: str):
    return TRAINED / name


@pytest.mark.parametrize(
    "source",
    [
        ["--model-dir", EXAMPLES / "hybrid"],
        ["--model-dir", EXAMPLES / "sac-continuous"],
        ["--onnx", EXAMPLES / "onnx-interfaces" / "Crawlerish-1x.onnx"],
    ],
)
def test_batch_of_a_continuous_policy_shows_its_mu(capsys, source):
    """--mode batch printed |mu| from the engine's every output; the file engine answered its deterministic ones alone
    (KeyError 'mu_abs_max', a traceback, exit 1)."""
    r = no_torch("--mode", "batch", "--batch", "4", *source)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-600:]
    assert "|mu| max" in r.stdout
    mine = json.loads(no_torch("--mode", "batch", "--batch", "4", "--json", *source).stdout)
    if not TORCH:
        return
    theirs = json.loads(
        with_torch(capsys, "--mode", "batch", "--batch", "4", "--json", "--engine", "onnxruntime", *source).stdout
    )
    assert abs(mine["mu_abs_max"] - theirs["mu_abs_max"]) < 1e-5


def test_an_onnx_of_another_policy_beside_a_run_folder_is_not_this_policy():
    """--model-dir examples/vector --onnx examples/lstm/Memory.onnx ran Memory.onnx as the policy (the torch install:
    not
    this policy, exit 1)."""
    r = no_torch(
        "--mode", "action", "--model-dir", EXAMPLES / "vector", "--onnx", EXAMPLES / "lstm" / "Memory.onnx", "--json"
    )
    assert r.returncode == 1 and "not this policy" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not_this_policy" in json.loads(r.stdout)


def test_an_earlier_checkpoints_onnx_does_not_replace_the_checkpoints_weights():
    """--model-dir examples/vector (final checkpoint 100000) --onnx Vector-50000.onnx ran the 50000 weights; the torch
    install runs the checkpoint's (the --onnx is its reference): the checkpoint's own ONNX runs."""
    plain = no_torch("--mode", "action", "--model-dir", EXAMPLES / "vector", "--json")
    named = no_torch(
        "--mode",
        "action",
        "--model-dir",
        EXAMPLES / "vector",
        "--onnx",
        EXAMPLES / "vector" / "Vector" / "Vector-50000.onnx",
        "--json",
    )
    assert plain.returncode == named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["continuous_actions"] == json.loads(plain.stdout)["continuous_actions"]


@pytest.mark.parametrize(
    "name, shapes", [("3DBallHard", [[27], [18]]), ("DungeonEscape", [[10], [360], [1]]), ("SoccerTwos", [[264], [72]])]
)
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
print(json.dumps({{"c": a.continuous.tolist(), "d": a.discrete.tolist(), "qc": b.get("continuous_actions",
np.zeros((3, 0))).tolist(),
                  "qd": b.get("discrete_actions", np.zeros((3, 0))).tolist()}}))
""")
    assert np.allclose(got["c"], got["qc"], atol=1e-6) and got["d"] == got["qd"]


@needs_torch
def test_boundary_inputs_of_a_1x_run_folder_equal_the_torch_installs(capsys):
    folder = trained("3DBallHard")
    args = ("--mode", "action", "--obs", "boundary", "--model-dir", folder, "--json")
    mine, theirs = (
        json.loads(no_torch(*args).stdout),
        json.loads(with_torch(capsys, *args, "--engine", "onnxruntime").stdout),
    )
    for name in ("obs_0", "obs_1"):
        assert np.allclose(mine["obs"][name], theirs["obs"][name], atol=1e-4)
    assert np.allclose(mine["continuous_actions"], theirs["continuous_actions"], atol=1e-5)


@pytest.mark.parametrize(
    "case, field, wanted",
    [
        ("goal-hyper", "parameters", 35685),
        ("goal-two-signals", "parameters", 2306),
        ("goal-visual-signal", "parameters", 14197),
        ("shared-critic", "shared_critic", True),
        ("visual-resnet", "shared_critic", True),
        ("vector", "shared_critic", False),
        ("bundled", "behavior", "Huggy"),
    ],
)
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
    assert refused(r).startswith("error: --providers: this onnxruntime has no CUDAExecutionProvider")


def test_a_negative_seed_samples_as_with_torch():
    """act(seed=-1) is within what act() takes (torch's manual_seed maps it); numpy's PCG64 raised ValueError."""
    got = no_torch_code(
        """
import json, numpy as np, inference
p = inference.load(%r)
a, b = (p.act(np.zeros(8, np.float32), deterministic=False, seed=-1)["continuous_actions"] for _ in range(2))
c = p.act(np.zeros(8, np.float32), deterministic=False, seed=-2**63)["continuous_actions"]
print(json.dumps([a.tolist(), b.tolist(), c.tolist()]))
"""
        % str(EXAMPLES / "vector")
    )
    assert got[0] == got[1] != got[2]


def test_ray_actors_load_the_policy_on_the_providers_named():
    """batch --ray: each PolicyActor loaded the policy without --providers (Ray's actors ran on the device's default
    provider, or the CPU, whatever --providers said). Checked without Ray: what an actor is given, and what it loads."""
    got = no_torch_code(
        """
import json
from mlagents_inference.fronts.cli import parse_args
from mlagents_inference.services.context import Context
from mlagents_inference.fronts.batch import PolicyActor
from mlagents_inference.services.ray_support import ray_model
ctx = Context(parse_args(["--mode", "batch", "--model-dir", %r, "--obs-file", "x.parquet", "--ray", "local",
                          "--providers", "CPUExecutionProvider", "--device", "cpu"]))
model = ray_model(ctx)
print(json.dumps([model["providers"], PolicyActor(model, None, 8, "order").policy.info["providers"]]))
"""
        % str(EXAMPLES / "vector")
    )
    assert got == [["CPUExecutionProvider"], ["CPUExecutionProvider"]]


def test_an_empty_providers_list_is_refused_as_the_apis_argument():
    """load(providers=[]) said "--providers: unknown execution provider ''" (an option the caller never gave)."""
    got = no_torch_code(
        """
import json, inference
try:
    inference.load(%r, providers=[])
except inference.UsageError as exc:
    print(json.dumps(str(exc)))
"""
        % str(EXAMPLES / "vector")
    )
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


@pytest.mark.parametrize(
    "source", [["--model-dir", EXAMPLES / "vector"], ["--onnx", EXAMPLES / "onnx-interfaces" / "Hybrid-2x.onnx"]]
)
def test_sample_shows_the_files_sigma(capsys, source):
    """--mode sample showed sigma from the checkpoint's modules alone: without torch its "sigma" was missing."""
    r = no_torch("--mode", "sample", *source, "--json")
    assert r.returncode == 0, r.stderr
    sigma = json.loads(r.stdout)["sigma"]
    log_sigma = json.loads(no_torch("--mode", "info", *source, "--json").stdout)["log_sigma"]
    assert np.allclose(np.log(sigma), log_sigma, atol=1e-6)
    if TORCH:
        theirs = json.loads(
            with_torch(capsys, "--mode", "sample", *source, "--json", "--engine", "onnxruntime").stdout
        )["sigma"]
        assert np.allclose(sigma, theirs, atol=1e-6)


@pytest.mark.parametrize("mode", ["export-onnx", "precision", "onnx-compare"])
def test_a_machine_without_torch_gets_one_line_saying_how_to_install_it(mode):
    """torch hidden from the interpreter (as on a fresh machine or a `pip install .` alone): the modes that need the
    rebuilt modules end in exit 2 and one line naming what to install, no traceback; the bundled sample's ONNX
    still runs `info` and listing the checkpoints still works."""
    done = no_torch("--mode", mode, input="")
    assert refused(done) == (
        f"error: --mode {mode} works on ML-Agents' modules rebuilt in torch, which is not installed: "
        'pip install ".[torch]" (or pip install torch; Ascend hosts: CANN\'s torch and torch_npu)'
    )
    for works in ("checkpoints", "info"):
        done = no_torch("--mode", works)
        assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stderr[-500:]
