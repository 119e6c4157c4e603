"""stream mode answering the lines already waiting together: one engine call for a group of plain
lines, each answer what it would have been alone (per-id memory, resets, errors in place, strict
JSON), checked against ML-Agents' ONNX through a bare onnxruntime session; and never a line held
back to gather others. Speed is measured by tools/bench_stream.py, not asserted here."""

import io
import json
import select
import subprocess
import sys

import numpy as np
import pytest
from conftest import (
    BUNDLED,
    BUNDLED_ONNX,
    EXAMPLES,
    ROOT,
    child_env,
    count_engine_calls,
    ort_deterministic,
    run_stream,
    strict,
)

import inference as I
from mlagents_inference.services.protocol import waiting_lines


@pytest.fixture(scope="module")
def policies():
    return {"huggy": I.load(BUNDLED), "lstm": I.load(EXAMPLES / "lstm")}


def test_waiting_lines_share_one_engine_call_and_keep_their_place(policies, monkeypatch):
    """300 waiting lines, plain ones among a batched line, a stochastic one, bad and blank lines:
    one answer each, in order; the plain lines' actions equal ML-Agents' ONNX and are answered
    by one engine call between the lines that must go alone."""
    obs = (np.random.RandomState(0).randn(300, 59) * 2).astype(np.float32)
    lines = [json.dumps({"id": i, "obs": obs[i].tolist()}) for i in range(300)]
    odd = {
        100: json.dumps({"id": "batch", "obs": obs[:2].tolist()}),
        150: json.dumps({"id": "noisy", "obs": obs[150].tolist(), "stochastic": True, "seed": 3}),
        200: "not json",
        201: json.dumps({"id": 201, "obs": [1.0] * 58}),
        202: json.dumps({"id": 202, "obs": ["1"] * 59}),
        203: '{"id": 203, "obs": [NaN' + ", 0" * 58 + "]}",
    }
    for i, line in odd.items():
        lines[i] = line
    text = "\n".join(lines[:250]) + "\n\n   \n" + "\n".join(lines[250:]) + "\n"
    calls = count_engine_calls(policies["huggy"], monkeypatch)
    answers = [strict(a) for a in run_stream(policies["huggy"], text, monkeypatch)]
    assert len(answers) == 300
    assert [a["id"] for a in answers] == [i if i not in odd else a["id"] for i, a in enumerate(answers)]
    assert answers[100]["id"] == "batch" and len(answers[100]["actions"]) == 2
    assert answers[150]["id"] == "noisy" and "actions" in answers[150]
    assert answers[200] == {"id": None, "error": "line is not JSON (or nested too deep)"}
    assert [answers[i]["id"] for i in (201, 202, 203)] == [201, 202, 203]
    assert all("error" in answers[i] and "actions" not in answers[i] for i in (201, 202, 203))
    plain = [i for i in range(300) if i not in odd]
    got = np.array([answers[i]["actions"] for i in plain], np.float32)
    assert np.abs(got - ort_deterministic(BUNDLED_ONNX, obs[plain])).max() <= 1e-5
    # every plain line in a shared call (a group is what one read returns: 64 kB here), the batched and
    # the stochastic line alone, the bad ones without the engine
    assert sum(calls) == 294 + 2 + 1 and len(calls) <= 12 and max(calls) >= 40, calls


def test_each_answer_is_the_one_it_gets_alone(policies, monkeypatch):
    """The same lines one group at a time and all waiting together: identical text, line for line."""
    obs = np.random.RandomState(1).randn(40, 59).astype(np.float32)
    lines = [json.dumps({"id": f"a{i}", "obs": obs[i].tolist()}) for i in range(40)]
    together = [strict(a) for a in run_stream(policies["huggy"], "".join(l + "\n" for l in lines), monkeypatch)]
    alone = [strict(run_stream(policies["huggy"], line + "\n", monkeypatch)[0]) for line in lines]
    assert together == alone


def lstm_reference(obs, masks, resets):
    """ML-Agents' ONNX stepped agent by agent: each agent's memory carried, zeros after a reset."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(EXAMPLES / "lstm" / "Memory.onnx"), providers=["CPUExecutionProvider"])
    steps, agents = obs.shape[:2]
    memory = np.zeros((agents, 1, 32), np.float32)
    actions, memories = [], []
    for t in range(steps):
        memory[resets[t]] = 0
        a, memory = session.run(
            ["deterministic_discrete_actions", "recurrent_out"],
            {"obs_0": obs[t], "action_masks": masks[t], "recurrent_in": memory},
        )
        actions.append(a.reshape(agents))
        memories.append(memory.reshape(agents, 32).copy())
    return np.array(actions), np.array(memories)


def test_lstm_agents_memory_and_resets_across_a_group(policies, monkeypatch):
    """64 agents x 6 steps all waiting at once (each id six times in one group), resets and masks
    on some lines: the per-id memory is carried exactly as line by line, equal to ML-Agents' ONNX."""
    rng = np.random.RandomState(2)
    steps, agents = 6, 64
    obs = rng.randn(steps, agents, 10).astype(np.float32)
    masks = np.ones((steps, agents, 4), np.float32)
    masks[:, ::5, 0] = 0
    resets = rng.rand(steps, agents) < 0.15
    lines = []
    for t in range(steps):
        for a in range(agents):
            msg = {"id": a, "obs": obs[t, a].tolist()}
            if a % 5 == 0:
                msg["action_masks"] = masks[t, a].astype(int).tolist()
            if resets[t, a]:
                msg["reset"] = True
            lines.append(json.dumps(msg))
    calls = count_engine_calls(policies["lstm"], monkeypatch)
    answers = [strict(a) for a in run_stream(policies["lstm"], "".join(l + "\n" for l in lines), monkeypatch)]
    assert [a["id"] for a in answers] == [a for _ in range(steps) for a in range(agents)]
    want_actions, want_memory = lstm_reference(obs, masks, resets)
    got_actions = np.array([a["discrete_actions"] for a in answers]).reshape(steps, agents)
    got_memory = np.array([a["memory"] for a in answers], np.float32).reshape(steps, agents, 32)
    assert np.array_equal(got_actions, want_actions)
    assert np.abs(got_memory - want_memory).max() <= 1e-5
    # an id's second line waits for its first: a call per step at least, more where a 64 kB read ends
    assert sum(calls) == steps * agents and steps <= len(calls) <= 2 * steps, calls


class Trickle(io.RawIOBase):
    """A stream that hands out its bytes a few at a time, as a pipe may."""

    def __init__(self, data: bytes, piece: int):
        self.data, self.piece = data, piece

    def readable(self):
        return True

    def read1(self, n=-1):
        out, self.data = self.data[: self.piece], self.data[self.piece :]
        return out

    read = read1


def test_waiting_lines_splits_long_and_partial_lines():
    data = b'{"a": 1}\n\n' + b"x" * 50 + b"\n" + b'{"b": 2}\n' + b"y" * 80 + b'\n{"c"'
    for piece in (1, 7, 64, 1000):
        groups = list(waiting_lines(Trickle(data, piece), limit=40))
        flat = [line for group in groups for line in group]
        assert flat == [b'{"a": 1}', None, b'{"b": 2}', None, b'{"c"'], (piece, flat)
        assert all(groups)
    assert [l for g in waiting_lines(Trickle(b"z" * 100, 9), limit=40) for l in g] == [None]


def test_a_line_is_never_held_back(tmp_path):
    """A live process: three lines in one write get three answers, then one line alone gets its
    answer, without more input coming (a batch is never waited for)."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir", str(BUNDLED)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    try:
        proc.stdin.write(b"".join(json.dumps({"id": i, "obs": [i / 10] * 59}).encode() + b"\n" for i in range(3)))
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], 120)[0], "no answer"
        got = [json.loads(proc.stdout.readline())["id"] for _ in range(3)]  # (the 2nd and 3rd may be buffered here)
        assert got == [0, 1, 2]
        proc.stdin.write(json.dumps({"id": "alone", "obs": [0.5] * 59}).encode() + b"\n")
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], 60)[0], "the lone line waited for company"
        assert json.loads(proc.stdout.readline())["id"] == "alone"
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0


def test_standard_library_json_gives_the_same_values(policies, monkeypatch):
    """Without orjson (a bare Ascend host): the same answers."""
    obs = np.random.RandomState(3).randn(20, 59).astype(np.float32)
    text = "".join(json.dumps({"id": i, "obs": obs[i].tolist()}) + "\n" for i in range(20)) + "bad\n"
    fast = [strict(a) for a in run_stream(policies["huggy"], text, monkeypatch)]
    monkeypatch.setitem(sys.modules, "orjson", None)
    slow = [strict(a) for a in run_stream(policies["huggy"], text, monkeypatch)]
    assert fast == slow and len(slow) == 21 and "error" in slow[-1]


@pytest.mark.parametrize("independent", [True, False])
def test_the_engines_flag_decides_whether_lines_share_a_call(independent, monkeypatch):
    """The lines waiting share one engine call where the engine says its rows are independent of the batch
    (engines.factory.Engine's rows_independent; onnxruntime's engines do), and go one call each where it says not,
    whatever the engine is named; the answers are the same either way."""
    from mlagents_inference.engines.factory import ENGINE_CLASSES, engine_class

    assert {engine_class(kind).rows_independent for kind in ENGINE_CLASSES if kind != "torch"} == {True}
    policy = I.load(EXAMPLES / "vector")
    lines = "".join(json.dumps({"id": i, "obs": [0.1 * i] * 8}) + "\n" for i in range(6))
    alone = [json.loads(a) for a in run_stream(policy, lines, monkeypatch)]
    monkeypatch.setattr(type(policy.engine), "rows_independent", independent, raising=False)
    calls = count_engine_calls(policy, monkeypatch)
    answers = [json.loads(a) for a in run_stream(policy, lines, monkeypatch)]
    assert calls == ([6] if independent else [1] * 6), calls
    for got, want in zip(answers, alone):
        assert got["id"] == want["id"]
        np.testing.assert_allclose(got["continuous_actions"], want["continuous_actions"], rtol=0, atol=1e-6)
