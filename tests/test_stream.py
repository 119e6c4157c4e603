"""stream mode, JSON lines in and out, answered one line at a time. The pipe tests
share one live process (a real pipe: each answer must arrive before the next line is sent),
the last of them ending it by closing its stdout; end of input and the statistics run in
this process. One line's failure (an engine error, out of memory, an id too long) is that
line's answer, and the memory kept per id is bounded in bytes (a real memory limit: a process
of its own)."""

import json
import resource
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import BUNDLED, BUNDLED_ONNX, BUNDLED_PT, EXAMPLES, ROOT, child_env, ort_deterministic, ort_mu, run

import inference as I
from mlagents_inference.core import observations as context
from mlagents_inference.core.observations import AgentMemories, check_rows_fit
from mlagents_inference.core.spec import InputSpec, PolicySettings
from mlagents_inference.services.protocol import stream_answer

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # (conftest.py)


def start(*extra):
    return subprocess.Popen(
        [sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir", str(BUNDLED), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        env=child_env(),
    )


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
    # (batched kernels may round differently)
    assert batch["id"] == "b" and np.abs(np.array(batch["actions"]) - got[:3]).max() <= 1e-5
    no_id = ask(proc, {"obs": obs[0].tolist()})
    assert no_id["id"] is None and len(no_id["actions"]) == 21


def test_bad_lines_answered_in_place(proc):
    good = {"id": "ok", "obs": [0.0] * 59}
    bad = [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"id": 1, "obs": [1, 2, 3]}),
        json.dumps({"id": 2, "obs": [float("nan")] + [0] * 58}),
        json.dumps({"id": 3, "obs": ["1.5"] * 59}),
        json.dumps({"id": 4}),
        json.dumps({"id": 5, "obs": [[1] * 59, [2]]}),
        json.dumps({"id": 6, "obs": [1e39] * 59}),
        json.dumps({"id": 7, "obs": [0] * 59, "stochastic": True, "seed": 2**64}),
    ]
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


def test_end_of_input_and_stats(capsys):
    lines = "".join(json.dumps({"id": i, "obs": [i / 10] * 59}) + "\n" for i in range(20)) + "garbage\n"
    code, out, err = run(capsys, "--mode", "stream", "--model-dir", BUNDLED, "--stream-stats", stdin=lines)
    assert code == 0
    answers = [json.loads(l) for l in out.splitlines()]
    assert len(answers) == 21 and [a["id"] for a in answers[:20]] == list(range(20)) and "error" in answers[20]
    reference = ort_deterministic(BUNDLED_ONNX, np.array([[i / 10] * 59 for i in range(20)], np.float32))
    assert np.abs(np.array([a["actions"] for a in answers[:20]]) - reference).max() <= 1e-5
    assert "lines=21 errors=1" in err and "p50=" in err and "p99=" in err
    assert "Traceback" not in err
    code, out, err = run(capsys, "--mode", "stream", "--model-dir", BUNDLED, stdin="")
    assert code == 0 and out == "" and "[stream]" not in err  # no statistics unless asked


# --- one line's failure is its answer; the memory kept per id is bounded in bytes ---------------------------


@pytest.fixture(scope="module")
def lstm_policy():
    return I.load(EXAMPLES / "lstm")


@pytest.fixture(scope="module")
def attention_policy():
    return I.load(EXAMPLES / "attention")


def attention_line(rows: int, ident) -> dict:
    return {"obs_0": [[[0.5] * 5] * 6] * rows, "obs_1": [[0.2] * 8] * rows, "id": ident}


@pytest.mark.parametrize(
    "failure",
    [
        MemoryError(),
        RuntimeError("DefaultCPUAllocator: can't allocate memory"),
        RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : something else"),
    ],
)
def test_an_engine_failure_on_one_line_is_that_lines_answer(attention_policy, monkeypatch, failure):
    memories = AgentMemories()
    good = stream_answer(attention_policy, attention_line(2, "a"), memories)
    calls = []

    def fail_once(flat, names=None):
        calls.append(1)
        raise failure

    with monkeypatch.context() as patch:
        patch.setattr(attention_policy.engine, "run", fail_once)
        with pytest.raises(I.UsageError) as info:
            stream_answer(attention_policy, attention_line(2, "a"), memories)
    assert calls and "failed on this line" in str(info.value)
    if not str(failure) or "alloc" in str(failure):
        assert "out of memory" in str(info.value)
    assert stream_answer(attention_policy, attention_line(2, "a"), memories) == good


def test_a_line_with_more_rows_than_memory_allows_is_refused(attention_policy, monkeypatch):
    monkeypatch.setattr(context, "available_memory", lambda: 64 << 20)
    with pytest.raises(I.UsageError, match="would need about .* GiB"):
        stream_answer(attention_policy, attention_line(3000, 1), AgentMemories())
    assert "discrete_actions" in stream_answer(attention_policy, attention_line(3, 1), AgentMemories())


def test_the_entity_attention_counts_in_the_memory_estimate(attention_policy, monkeypatch):
    """4 heads of N x N scores per row: a buffer of N entities needs more than N times one entity."""
    monkeypatch.setattr(context, "available_memory", lambda: 1 << 40)
    s = attention_policy.settings
    many = PolicySettings(
        [InputSpec("obs_0", "entities", (4000, 5))] + s.inputs[1:],
        s.hidden_units,
        s.num_layers,
        s.normalize,
        discrete_branches=s.discrete_branches,
    )
    with pytest.raises(I.UsageError, match="GiB"):
        check_rows_fit(10_000, many, "per line")  # 10,000 x 4 x 4000^2 floats: 2.5 TB


def test_a_long_id_is_refused_and_the_stream_answers_on(lstm_policy):
    memories = AgentMemories()
    line = {"obs": [0.1] * 10}
    with pytest.raises(I.UsageError, match="longer than 256"):
        stream_answer(lstm_policy, {**line, "id": "x" * 257}, memories)
    assert len(memories) == 0
    assert "memory" in stream_answer(lstm_policy, {**line, "id": "x" * 256}, memories)
    assert list(memories) == [json.dumps("x" * 256)]


def test_a_long_id_is_not_echoed(capsys):
    """A refused 1 MB id is answered with "id": null, not sent back."""
    long_id = "x" * 1_000_000
    lines = [json.dumps({"obs": [0.1] * 10, "id": long_id}), json.dumps({"obs": [0.1] * 10, "id": "ok"})]
    code, out, err = run(capsys, "--mode", "stream", "--model-dir", EXAMPLES / "lstm", stdin="\n".join(lines) + "\n")
    answers = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(out) < 10_000, err
    assert answers[0] == {"id": None, "error": '"id" is longer than 256 characters'}
    assert answers[1]["id"] == "ok" and "discrete_actions" in answers[1]


def test_stream_memory_is_bounded_in_bytes(lstm_policy):
    """Batch ids of 200 rows (200 x 32 floats = 25.6 kB each) against a 256 kB budget: the bytes
    kept never pass it; the id answered last is always kept."""
    memories = AgentMemories(max_ids=1000, max_bytes=256 << 10)
    batch = {"obs": [[0.1] * 10] * 200}
    for i in range(40):
        stream_answer(lstm_policy, {**batch, "id": i}, memories)
        kept = sum(len(k) + v.nbytes for k, v in memories.items())
        assert kept <= memories.max_bytes and memories.nbytes >= kept
        assert json.dumps(i) in memories
    assert 5 <= len(memories) < 11


def test_stream_memory_drops_the_least_recently_answered_id(lstm_policy):
    memories = AgentMemories(max_ids=3)
    line = {"obs": [0.1] * 10}
    for ident in ["a", "b", "c", "a", "d"]:  # "a" answered again: "b" is the oldest when "d" comes
        stream_answer(lstm_policy, {**line, "id": ident}, memories)
    assert list(memories) == ['"c"', '"a"', '"d"']


def test_a_stream_line_out_of_memory_under_a_real_limit(tmp_path):
    """The attention example answers a line; then its address space is capped at what it uses
    + 300 MiB (prlimit) and a 30,000-row line (about 1 GB inside onnxruntime) comes: that line
    is answered with an error, the next one normally, and the stream ends with exit 0."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir", str(EXAMPLES / "attention")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    small = json.dumps({"obs_0": [[0.1] * 5], "obs_1": [0.2] * 8, "id": "small"})
    big = json.dumps({"obs_0": [[[0.5] * 5] * 6] * 30_000, "obs_1": [[0.2] * 8] * 30_000, "id": "big"})
    try:
        proc.stdin.write(small + "\n")
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())
        assert "discrete_actions" in first, first
        status = Path(f"/proc/{proc.pid}/status").read_text()
        used = next(int(l.split()[1]) * 1024 for l in status.splitlines() if l.startswith("VmSize:"))
        try:
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (used + (300 << 20), resource.RLIM_INFINITY))
        except (OSError, AttributeError) as exc:
            pytest.skip(f"cannot limit another process's memory here ({exc})")
        proc.stdin.write(big + "\n" + small + "\n")
        proc.stdin.flush()
        answers = [proc.stdout.readline(), proc.stdout.readline()]
        proc.stdin.close()
        code = proc.wait(timeout=120)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert answers[0] and answers[1], (answers, err[-2000:])
    failed, after = json.loads(answers[0]), json.loads(answers[1])
    assert failed["id"] == "big" and "memory" in failed["error"], failed
    assert after == first, after
    assert code == 0 and "Traceback" not in err, (code, err[-2000:])


# --- last: ends the shared process --------------------------------------------------------------------------


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
