"""Shared helpers. Every policy kind is in the repository: examples/ (one run folder per kind, written by
ML-Agents 1.1.0; examples/trained/, three policies Unity trained, older ONNX interface) and the bundled Huggy
sample under assets/. The larger development fixtures outside the repository ($HUGGY_FIXTURES, default
../shared/fixtures beside the checkout) are optional: tests that use them run only where they are present."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import inference  # noqa: E402

FIXTURES = Path(os.environ.get("HUGGY_FIXTURES") or ROOT.parent / "shared" / "fixtures")
BUNDLED = ROOT / "assets" / "ppo-Huggy-sample"
EXAMPLES = ROOT / "examples"  # one run folder per policy kind, written by ML-Agents 1.1.0 (tools/mlagents_fixtures.py)
TRAINED = EXAMPLES / "trained"  # Unity's trained 3DBallHard, DungeonEscape, SoccerTwos (examples/trained/README.md)
AGENT = EXAMPLES / "vector"  # one unnormalised vector input, two checkpoints (50000, 100000)
BUNDLED_PT = BUNDLED / "Huggy" / "Huggy-600017.pt"
BUNDLED_ONNX = BUNDLED / "Huggy" / "Huggy-600017.onnx"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"fixture {path} is absent (set HUGGY_FIXTURES)")
    return path


@pytest.fixture(autouse=True)
def offline_env(monkeypatch):
    """No test reaches for the Hub; HUGGY_MODEL_DIR from the caller's shell does not leak in."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HUGGY_MODEL_DIR", raising=False)


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HUGGY_MODEL_DIR"}
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env


def cli(*args, input=None, timeout=300, env=None, cwd=None) -> subprocess.CompletedProcess:
    """Run inference.py as a user would, in a fresh process."""
    return subprocess.run([sys.executable, str(ROOT / "inference.py"), *map(str, args)], input=input,
                          capture_output=True, text=True, timeout=timeout, env=env or child_env(), cwd=cwd)


def call(capsys, *args):
    """Run main() in this process with --json; returns (exit code, parsed JSON or None, stderr)."""
    code = inference.main([*map(str, args), "--json"])
    out, err = capsys.readouterr()
    lines = [l for l in out.splitlines() if l.strip()]
    return code, (json.loads(lines[-1]) if lines and code in (0, 1) else None), err


def strict(text: str):
    """A stream answer read as strict JSON (NaN, Infinity refused)."""
    def refuse(constant):
        raise ValueError(f"non-strict JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


def ort_deterministic(onnx_path, obs) -> np.ndarray:
    """ML-Agents' own ONNX through a bare onnxruntime session: the reference."""
    import onnxruntime as ort
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return session.run(["deterministic_continuous_actions"], {"obs_0": np.asarray(obs, np.float32)})[0]


def ort_mu(onnx_path, obs) -> np.ndarray:
    """mu read out of ML-Agents' own ONNX (its mu Gemm made a graph output)."""
    import onnx
    import onnxruntime as ort
    model = onnx.load(str(onnx_path))
    name = next(n.output[0] for n in model.graph.node if n.op_type == "Gemm" and "mu" in n.output[0])
    model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run([name], {"obs_0": np.asarray(obs, np.float32)})[0]


@pytest.fixture(scope="module")
def one_torch_thread():
    """For modules whose batches are small (use: pytestmark = pytest.mark.usefixtures(...)): one intra-op thread is faster, and it does not stall when other work
    shares the CPUs (two threads spin-waiting on a loaded 2-core machine made an LSTM step 50x slower)."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
