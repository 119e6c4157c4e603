"""benchmark's bare contender (mlagents_inference/fronts/bare_onnxruntime.py), run as benchmark runs it: its source
with `python -c` in a process of its own (the process is what is tested: what it imports, its pipes, its exit code).
"""

import pickle
import subprocess

import numpy as np
import onnxruntime as ort
from conftest import EXAMPLES

from mlagents_inference.fronts.benchmark import bare_onnxruntime_command

VECTOR_ONNX = EXAMPLES / "vector" / "Vector.onnx"


def _job(model) -> dict:
    session = ort.InferenceSession(str(VECTOR_ONNX), providers=["CPUExecutionProvider"])
    feed = {
        i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in session.get_inputs()
    }
    feed["not_an_input"] = np.zeros(1)  # (left out, as benchmark's feed may carry inputs the file lacks)
    return {"model": model, "fetch": [o.name for o in session.get_outputs()], "feed": feed}


def _start() -> subprocess.Popen:
    command = bare_onnxruntime_command()
    command[1:1] = ["-X", "importtime"]  # (each import, on stderr)
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _ask(proc: subprocess.Popen, message):
    pickle.dump(message, proc.stdin)
    proc.stdin.flush()
    return pickle.load(proc.stdout)


def test_the_bare_program_times_blocks_and_imports_nothing_of_the_package():
    proc = _start()
    try:
        ready = _ask(proc, _job(str(VECTOR_ONNX)))
        assert ready == ("ready", ort.__version__)
        times = _ask(proc, 7)
        assert len(times) == 7 and all(isinstance(t, float) and t > 0 for t in times)
        _, err = proc.communicate(timeout=30)  # (closes stdin: the end of requests)
    finally:
        proc.kill()
    assert proc.returncode == 0
    imported = {line.split("|")[-1].strip() for line in err.decode().splitlines() if line.startswith("import time:")}
    assert "onnxruntime" in imported
    assert not {m for m in imported if m.split(".")[0] in ("mlagents_inference", "inference", "torch")}


def test_the_bare_program_answers_a_model_it_cannot_run_and_exits_1():
    proc = _start()
    try:
        kind, message = _ask(proc, _job(b"not an onnx model"))
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert kind == "error" and message.startswith("InvalidProtobuf: ") and len(message) <= 200 + 17, message
    assert proc.returncode == 1
