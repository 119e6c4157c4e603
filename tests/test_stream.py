"""stream mode, JSON lines in and out, answered one line at a time. The pipe tests
share one live process (a real pipe: each answer must arrive before the next line is sent),
the last of them ending it by closing its stdout; end of input and the statistics run in
this process."""
import io
import json
import select
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import BUNDLED, BUNDLED_ONNX, BUNDLED_PT, ROOT, child_env, ort_deterministic, ort_mu

import inference as I


def start(*extra):
    return subprocess.Popen([sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir",
                             str(BUNDLED), *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1, env=child_env())


@pytest.fixture(scope="module")
def proc():
    """One stream process for the pipe tests; whichever way it is ended (its input closed here,
    or its output by test_closed_pipe_ends_quietly), it exits 0 without a traceback."""
    live = start()
    yield live
    try:
        live.stdin.close()
    except BrokenPipeError:
        pass
    code = live.wait(timeout=120)
    stderr = live.stderr.read()
    assert code == 0 and "Traceback" not in stderr, stderr


def ask(proc, message, timeout=120.0) -> dict:
    """Send one line and wait for its answer: the stream must answer before the next line comes."""
    assert proc.poll() is None, "the stream process has ended"
    proc.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no answer: the stream blocked waiting for more input"
    return json.loads(proc.stdout.readline())


def test_line_by_line_control_loop(proc):
    obs = np.random.RandomState(0).randn(5, 59).astype(np.float32)
    answers = [ask(proc, {"id": i, "obs": obs[i].tolist()}) for i in range(5)]
    assert [a["id"] for a in answers] == list(range(5))
    got = np.array([a["actions"] for a in answers], np.float32)
    assert np.abs(got - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5
    batch = ask(proc, {"id": "b", "obs": obs[:3].tolist()})
    assert batch["id"] == "b" and np.abs(np.array(batch["actions"]) - got[:3]).max() <= 1e-5  # batched kernels may round differently
    no_id = ask(proc, {"obs": obs[0].tolist()})
    assert no_id["id"] is None and len(no_id["actions"]) == 21


def test_bad_lines_answered_in_place(proc):
    good = {"id": "ok", "obs": [0.0] * 59}
    bad = ["not json", json.dumps([1, 2]), json.dumps({"id": 1, "obs": [1, 2, 3]}),
           json.dumps({"id": 2, "obs": [float("nan")] + [0] * 58}),
           json.dumps({"id": 3, "obs": ["1.5"] * 59}), json.dumps({"id": 4}), json.dumps({"id": 5, "obs": [[1] * 59, [2]]}),
           json.dumps({"id": 6, "obs": [1e39] * 59}), json.dumps({"id": 7, "obs": [0] * 59, "stochastic": True,
                                                                   "seed": 2**64})]
    for line in bad:
        answer = ask(proc, line)
        assert "error" in answer and "actions" not in answer, (line, answer)
        assert ask(proc, good)["id"] == "ok"  # the stream goes on
    ids = [ask(proc, line)["id"] for line in bad[2:]]
    assert ids == [1, 2, 3, 4, 5, 6, 7]
    assert "error" in ask(proc, {"id": 8, "obs": [True] * 59}) and "error" in ask(proc, {"id": 9, "obs": [None] * 59})


def test_stochastic_lines_follow_the_sample_convention(proc):
    obs = np.random.RandomState(4).randn(59).astype(np.float32)
    answer = ask(proc, {"id": 1, "obs": obs.tolist(), "stochastic": True, "seed": 4})
    again = ask(proc, {"id": 2, "obs": obs.tolist(), "stochastic": True, "seed": 4})
    assert answer["actions"] == again["actions"]
    mu = ort_mu(BUNDLED_ONNX, obs[None])[0].astype(np.float64)
    z = torch.randn((1, 21), generator=torch.Generator().manual_seed(4)).numpy()[0]
    state = torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)["Policy"]
    sigma = np.exp(state["action_model._continuous_distribution.log_sigma"].numpy().reshape(-1).astype(np.float64))
    assert np.abs(np.array(answer["actions"]) - np.clip(mu + z * sigma, -3, 3) / 3).max() <= 1e-5


def stream_in_process(capsys, monkeypatch, text: str, *extra) -> tuple:
    """main() in stream mode on `text` as standard input: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code = I.main(["--mode", "stream", "--model-dir", str(BUNDLED), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_end_of_input_and_stats(capsys, monkeypatch):
    lines = "".join(json.dumps({"id": i, "obs": [i / 10] * 59}) + "\n" for i in range(20)) + "garbage\n"
    code, out, err = stream_in_process(capsys, monkeypatch, lines, "--stream-stats")
    assert code == 0
    answers = [json.loads(l) for l in out.splitlines()]
    assert len(answers) == 21 and [a["id"] for a in answers[:20]] == list(range(20)) and "error" in answers[20]
    reference = ort_deterministic(BUNDLED_ONNX, np.array([[i / 10] * 59 for i in range(20)], np.float32))
    assert np.abs(np.array([a["actions"] for a in answers[:20]]) - reference).max() <= 1e-5
    assert "lines=21 errors=1" in err and "p50=" in err and "p99=" in err
    assert "Traceback" not in err
    code, out, err = stream_in_process(capsys, monkeypatch, "")
    assert code == 0 and out == "" and "[stream]" not in err  # no statistics unless asked


def test_closed_pipe_ends_quietly(proc):
    """Last in this file: it ends the shared process."""
    line = json.dumps({"obs": [0.5] * 59}) + "\n"
    ask(proc, line.strip())
    proc.stdout.close()  # the controller goes away
    try:
        for _ in range(2000):
            proc.stdin.write(line)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in proc.stderr.read()
