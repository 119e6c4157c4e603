"""Issue 6: stream mode, JSON lines in and out, answered one line at a time."""
import json
import select
import subprocess
import sys

import numpy as np
import torch

import inference as I
from conftest import BUNDLED, BUNDLED_ONNX, ROOT, child_env, cli, ort_deterministic, ort_mu


def start(*extra):
    return subprocess.Popen([sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir",
                             str(BUNDLED), *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1, env=child_env())


def ask(proc, message, timeout=60.0) -> dict:
    """Send one line and wait for its answer: the stream must answer before the next line comes."""
    proc.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no answer: the stream blocked waiting for more input"
    return json.loads(proc.stdout.readline())


def test_line_by_line_control_loop():
    proc = start()
    try:
        obs = np.random.RandomState(0).randn(5, 59).astype(np.float32)
        answers = [ask(proc, {"id": i, "obs": obs[i].tolist()}) for i in range(5)]
        assert [a["id"] for a in answers] == list(range(5))
        got = np.array([a["actions"] for a in answers], np.float32)
        assert np.abs(got - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5
        batch = ask(proc, {"id": "b", "obs": obs[:3].tolist()})
        assert batch["id"] == "b" and np.abs(np.array(batch["actions"]) - got[:3]).max() <= 1e-6
        no_id = ask(proc, {"obs": obs[0].tolist()})
        assert no_id["id"] is None and len(no_id["actions"]) == 21
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        assert "Traceback" not in proc.stderr.read()


def test_bad_lines_answered_in_place():
    proc = start()
    good = {"id": "ok", "obs": [0.0] * 59}
    bad = ["not json", json.dumps([1, 2]), json.dumps({"id": 1, "obs": [1, 2, 3]}),
           json.dumps({"id": 2, "obs": [float("nan")] + [0] * 58}).replace("NaN", "NaN"),
           json.dumps({"id": 3, "obs": ["1.5"] * 59}), json.dumps({"id": 4}), json.dumps({"id": 5, "obs": [[1] * 59, [2]]}),
           json.dumps({"id": 6, "obs": [1e39] * 59}), json.dumps({"id": 7, "obs": [0] * 59, "stochastic": True,
                                                                   "seed": -1})]
    try:
        for line in bad:
            answer = ask(proc, line)
            assert "error" in answer and "actions" not in answer, (line, answer)
            assert ask(proc, good)["id"] == "ok"  # the stream goes on
        ids = [ask(proc, line)["id"] for line in bad[2:]]
        assert ids == [1, 2, 3, 4, 5, 6, 7]
        assert "error" in ask(proc, {"id": 8, "obs": [True] * 59}) and "error" in ask(proc, {"id": 9, "obs": [None] * 59})
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0


def test_stochastic_lines_follow_the_sample_convention():
    proc = start()
    try:
        obs = I.random_obs(4, 59)
        answer = ask(proc, {"id": 1, "obs": obs.tolist(), "stochastic": True, "seed": 4})
        again = ask(proc, {"id": 2, "obs": obs.tolist(), "stochastic": True, "seed": 4})
        assert answer["actions"] == again["actions"]
        mu = ort_mu(BUNDLED_ONNX, obs[None])[0].astype(np.float64)
        z = torch.randn((1, 21), generator=torch.Generator().manual_seed(4)).numpy()[0]
        sigma = np.exp(I.load_policy_spec(I.BUNDLED_MODEL_DIR / "Huggy" / "Huggy-600017.pt").log_sigma.astype(np.float64))
        assert np.abs(np.array(answer["actions"]) - np.clip(mu + z * sigma, -3, 3) / 3).max() <= 1e-5
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def test_end_of_input_and_stats():
    lines = "".join(json.dumps({"id": i, "obs": [i / 10] * 59}) + "\n" for i in range(20)) + "garbage\n"
    result = cli("--mode", "stream", "--stats", "--model-dir", BUNDLED, input=lines)
    assert result.returncode == 0
    answers = [json.loads(l) for l in result.stdout.splitlines()]
    assert len(answers) == 21 and [a["id"] for a in answers[:20]] == list(range(20)) and "error" in answers[20]
    assert "lines=21 errors=1" in result.stderr and "p50=" in result.stderr and "p99=" in result.stderr
    assert "Traceback" not in result.stderr
    empty = cli("--mode", "stream", "--model-dir", BUNDLED, input="")
    assert empty.returncode == 0 and empty.stdout == ""


def test_closed_pipe_ends_quietly():
    proc = start()
    line = json.dumps({"obs": [0.5] * 59}) + "\n"
    ask(proc, line.strip())
    proc.stdout.close()  # the controller goes away
    try:
        for _ in range(2000):
            proc.stdin.write(line)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    assert proc.wait(timeout=60) == 0
    assert "Traceback" not in proc.stderr.read()
