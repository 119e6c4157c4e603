"""ServedCommunicator (clients/csharp/Runtime/Communicator/) compiled with Mono's mcs against ML-Agents' own runtime
(com.unity.ml-agents 3.0.0, the pinned copy in clients/csharp/Tests~/MLAgentsRuntime; only UnityEngine and Sentis are
stand-ins) and driven by the console harness (Tests~/UnityCommunicator/Harness.cs) through the real
Academy.EnvironmentStep against live `--mode serve` processes: what the agents' sensors wrote is what was sent, the
actions applied equal inference.load(...).act() on the lines sent (each agent's memory carried as the server carries
it), and a silent, late or killed server never blocks a step.

Without `mcs`/`mono` the tests skip on a developer's machine and fail where CI is set (as test_csharp_client.py)."""

import collections
import contextlib
import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, copy_run, mono_or_skip, serve_process

import inference

BENCH = ROOT / "tools" / "bench_unity_communicator.py"
# Not a speed target (that is tools/bench_unity_communicator.py's): a step that waited on the socket would take the
# read timeout (10 s) or the connect timeout (1 s); none may come near either.
NOT_BLOCKED_MS = 500.0


def load_bench():
    """tools/bench_unity_communicator.py, whose build() compiles the harness for the benchmark and these tests alike."""
    spec = importlib.util.spec_from_file_location("bench_unity_communicator", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    mcs, mono = mono_or_skip()
    out = tmp_path_factory.mktemp("unity")
    built = load_bench().build(mcs, out)  # raises BuildError with what mcs said
    return {"mono": mono, "exe": built["exe"], "dir": out, "said": built["said"]}


@contextlib.contextmanager
def server(name: str):
    proc, address, _ = serve_process("--model-dir", EXAMPLES / name, "--listen", "127.0.0.1:0")
    try:
        yield proc, address
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()


def flat(text: str) -> list:
    """The harness' observations: inputs joined by ';', each flat; a camera frame handed over as its bytes is 'u'
    and the bytes (uint8, as the server reads them: pixels)."""
    return [
        np.array([int(v) for v in part[1:].split(",")], np.uint8)
        if part.startswith("u")
        else np.array([float(v) for v in part.split(",") if v], np.float32)
        for part in text.split(";")
    ]


def drive(harness, address, sensors, continuous=0, branches=(), masks=False, agents=3, steps=30, **kw) -> dict:
    """Runs the harness; its OUT file parsed: {"sent": {agent: [(seq, reset, [flat arrays], mask)]}, "wrote":
    {(step, agent): [flat arrays]}, "applied": [(step, agent, seq, continuous, discrete)], "step_ms": [...],
    "comm": [(ms, bytes, longest call ms)] per step (the communicator's own calls on the main thread), "behaviour":
    {agent: name}, "logged": [...]}. kw: episode, churn, wait_ms, fallback, warm, also (a second behaviour: name,
    address, sensors, continuous, branches, masks, agents), models (ServedCommunicator.ModelFor: {behaviour: model})."""
    out = harness["dir"] / "run.txt"
    args = [sensors, continuous, ",".join(map(str, branches)) or "-", int(masks), agents, steps]
    args += [kw.get("episode", 0), int(kw.get("churn", False)), kw.get("wait_ms", 0), out]
    args += ["warm"] if kw.get("warm") else []
    if kw.get("also"):
        name, address2, sensors2, continuous2, branches2, masks2, agents2 = kw["also"]
        args += ["--also", name, address2, sensors2, continuous2, ",".join(map(str, branches2)) or "-"]
        args += [int(masks2), agents2]
    if kw.get("models"):  # {behaviour: the model it asks its server for}
        args += ["--models", ",".join(f"{b}={m}" for b, m in kw["models"].items())]
    r = subprocess.run(
        [
            harness["mono"],
            str(harness["exe"]),
            *(["--policy-server", address, "-"] if kw.get("fallback") else ["--mlagents-port", "1", address]),
            *map(str, args),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and "DONE" in r.stdout, (r.stdout[-2000:], r.stderr[-3000:])
    got = {"sent": {}, "wrote": {}, "applied": [], "step_ms": [], "comm": [], "behaviour": {}, "logged": []}
    for line in out.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "SENT":
            seq, agent, reset, obs, mask, behaviour = rest.split(" ")
            masks_ = None if mask == "-" else [int(v) for v in mask.split(",")]
            got["sent"].setdefault(int(agent), []).append((int(seq), reset == "reset", flat(obs), masks_))
            got["behaviour"][int(agent)] = behaviour
        elif kind == "WROTE":
            step, agent, obs = rest.split(" ")
            got["wrote"][int(step), int(agent)] = flat(obs)
        elif kind == "APPLIED":
            step, agent, seq, cont, disc, behaviour = rest.split(" ")
            got["applied"].append((int(step), int(agent), int(seq), cont, disc))
            got["behaviour"][int(agent)] = behaviour
        elif kind == "STEP":
            got["step_ms"].append(float(rest.split(" ")[1]))
        elif kind == "COMM":
            _, ms, allocated, longest, _ = rest.split(" ")
            got["comm"].append((float(ms), int(allocated), float(longest)))
        elif kind == "LOGGED":
            got["logged"].append(rest)
    return got


def same_pixels(sent: np.ndarray, wrote: np.ndarray) -> bool:
    """What was sent is what the sensor wrote: the floats themselves, or a camera's bytes (a pixel written as
    byte / 255f)."""
    if sent.dtype == np.uint8:
        return np.array_equal(sent.astype(np.float32) / np.float32(255), wrote)
    return np.array_equal(sent, wrote)


def replay(name: str, sent: dict) -> dict:
    """(agent, seq) -> the local policy's answer to that line, each agent's memory carried as the server carries it
    (per connection and agent id, zeros after a reset)."""
    policy = inference.load(EXAMPLES / name)
    shapes = [tuple(spec["shape"]) for spec in policy.info["inputs"]]
    want = {}
    for agent, lines in sent.items():
        memory = None
        for seq, reset, arrays, mask in sorted(lines, key=lambda line: line[0]):
            if reset:
                memory = None
            obs = [a.reshape(shape) for a, shape in zip(arrays, shapes)]
            out = policy.act(obs[0] if len(obs) == 1 else obs, action_masks=mask, deterministic=True, memory=memory)
            memory = out.get("memory")
            want[agent, seq] = out
    return want


def check_actions(name, got, continuous, branches):
    """Every applied answer equals the local policy's on the line it answered; returns how many were answered."""
    want = replay(name, got["sent"])
    answered = [a for a in got["applied"] if a[2] >= 0]
    for step, agent, seq, cont, disc in answered:
        out = want[agent, seq]
        if continuous:
            values = np.array([float(v) for v in cont.split(",")], np.float32)
            assert np.allclose(values, np.ravel(out["continuous_actions"]), rtol=0, atol=1e-5), (step, agent, seq)
        if branches:
            assert [int(v) for v in disc.split(",")] == np.ravel(out["discrete_actions"]).tolist(), (step, agent, seq)
    return len(answered)


CASES = {  # example: (the harness' sensors, continuous, branches, masks, steps per episode, churn)
    "vector": ("v8", 2, [], False, 0, False),  # (with waitMs 2: answers may land in their own step)
    "discrete-multi": ("v20,v6", 0, [3, 2, 5], True, 0, False),
    "lstm": ("v10", 0, [4], False, 4, True),
    "visual-simple": ("c3x36x36,v5", 2, [], False, 0, False),
    "attention": ("b6x5,v8", 0, [3, 3], True, 0, False),
    "lstm-camera-nonsquare": ("c1x24x30,v3", 0, [3, 2], True, 5, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_actions_applied_through_the_real_step_loop_equal_the_local_policys(harness, name):
    sensors, continuous, branches, masks, episode, churn = CASES[name]
    with server(name) as (_, address):
        wait_ms = 2 if name == "vector" else 0
        got = drive(
            harness, address, sensors, continuous, branches, masks, episode=episode, churn=churn, wait_ms=wait_ms
        )
    # what was sent is what the agents' sensors wrote, in the policy's input order (cameras channel-first); the
    # communicator numbers the batches it hands over, one per step
    assert got["sent"], got["logged"]  # (nothing sent: the connection, e.g. its 1 s timeout on a loaded machine)
    for agent, lines in got["sent"].items():
        for seq, _, arrays, _ in lines:
            wrote = got["wrote"][seq, agent]
            assert len(arrays) == len(wrote) and all(same_pixels(a, w) for a, w in zip(arrays, wrote))
    answered = check_actions(name, got, continuous, branches)
    assert answered >= 10, answered  # (how many: the machine's load decides; every one is checked)
    if masks:  # no masked action was taken
        mask_of = {(agent, seq): mask for agent, lines in got["sent"].items() for seq, _, _, mask in lines}
        for _, agent, seq, _, disc in (a for a in got["applied"] if a[2] >= 0):
            offset = 0
            for branch, action in zip(branches, map(int, disc.split(","))):
                assert mask_of[agent, seq][offset + action] == 1
                offset += branch
    if episode:  # each episode's end starts that agent's memory over on the server
        resets = [seq for lines in got["sent"].values() for seq, reset, _, _ in lines if reset]
        assert len(resets) >= 30 // episode
    if churn:  # agents added and removed mid-run: ids never reused, each agent's memory its own (replay holds it)
        assert len(got["sent"]) > 3
    assert max(got["step_ms"]) < NOT_BLOCKED_MS


def stall_mid_line(dst, data: bytes, lines: int, stalled: threading.Event, stop: threading.Event) -> None:
    """Sends `lines` whole lines of `data` and half of the next, then nothing until `stop`, the connection open."""
    cut = 0
    for _ in range(lines):
        cut = data.index(b"\n", cut) + 1
    end = data.find(b"\n", cut)
    dst.sendall(data[: cut + max((end - cut) // 2, 1) if end > cut else cut + 1])
    stalled.set()
    while not stop.is_set():
        time.sleep(0.05)


@pytest.mark.parametrize("camera", ["c", "g"])
def test_a_cameras_pixels_go_to_the_client_as_bytes_and_other_shades_as_floats(harness, camera):
    """A frame whose every value is byte / 255f (what ML-Agents' ObservationWriter.WriteTexture writes for a colour
    camera) is handed to the client as its bytes (the client's uint8 path: the server reads them as pixels, x / 255); a
    frame of other values in [0, 1] (a grayscale camera's (r + g + b) / 3f / 255f, a float render texture) keeps its
    floats. Either way the actions equal the local policy's on what was sent."""
    with server("visual-simple") as (_, address):
        got = drive(harness, address, camera + "3x36x36,v5", 2, agents=3, steps=20, wait_ms=2)
    frames = [arrays[0] for lines in got["sent"].values() for _, _, arrays, _ in lines]
    assert frames and all(f.dtype == (np.uint8 if camera == "c" else np.float32) for f in frames)
    for agent, lines in got["sent"].items():
        for seq, _, arrays, _ in lines:
            assert all(same_pixels(a, w) for a, w in zip(arrays, got["wrote"][seq, agent]))
    assert check_actions("visual-simple", got, 2, []) >= 10


def test_two_behaviours_in_one_scene_are_each_answered_by_their_own_server_through_the_same_step(harness):
    """Agents of two behaviour names (examples/vector as "Served", examples/discrete-multi with masks as "Discrete"),
    stepped by the same Academy.EnvironmentStep, each behaviour sent to its own address (the sample's
    --policy-server NAME=ADDRESS mapping): every action applied equals its own policy's."""
    with server("vector") as (_, vector), server("discrete-multi") as (_, discrete):
        also = ("Discrete", discrete, "v20,v6", 0, [3, 2, 5], True, 3)
        got = drive(harness, vector, "v8", 2, agents=3, steps=30, wait_ms=2, also=also)
    by_name = {"Served": ("vector", 2, []), "Discrete": ("discrete-multi", 0, [3, 2, 5])}
    assert sorted(collections.Counter(got["behaviour"].values()).items()) == [("Discrete", 3), ("Served", 3)]
    for behaviour, (name, continuous, branches) in by_name.items():
        agents = {agent for agent, b in got["behaviour"].items() if b == behaviour}
        own = {
            "sent": {agent: lines for agent, lines in got["sent"].items() if agent in agents},
            "applied": [a for a in got["applied"] if a[1] in agents],
        }
        assert check_actions(name, own, continuous, branches) >= 10, (behaviour, got["logged"])
    # one step: both behaviours' agents acted in each step
    steps = collections.defaultdict(set)
    for step, agent, _, _, _ in got["applied"]:
        steps[step].add(got["behaviour"][agent])
    assert all(names == {"Served", "Discrete"} for names in steps.values()) and len(steps) == 30


def test_two_behaviours_in_one_scene_are_answered_by_one_server_of_two_models(harness, tmp_path):
    """One serve of a run folder of two behaviours (examples/vector's Vector, examples/discrete-multi's
    DiscreteMulti), both behaviours of the scene at its one address, each asking for its model
    (ServedCommunicator.ModelFor): every action applied equals its own policy's."""
    run = copy_run(EXAMPLES / "vector", tmp_path, "two")
    shutil.copytree(EXAMPLES / "discrete-multi" / "DiscreteMulti", run / "DiscreteMulti")
    shutil.copyfile(EXAMPLES / "discrete-multi" / "DiscreteMulti.onnx", run / "DiscreteMulti.onnx")
    status_file = run / "run_logs" / "training_status.json"
    status = json.loads(status_file.read_text())
    other = json.loads((EXAMPLES / "discrete-multi" / "run_logs" / "training_status.json").read_text())
    status["DiscreteMulti"] = other["DiscreteMulti"]
    status_file.write_text(json.dumps(status, indent=4))
    proc, address, _ = serve_process("--model-dir", run, "--listen", "127.0.0.1:0")
    try:
        also = ("Discrete", address, "v20,v6", 0, [3, 2, 5], True, 3)
        models = {"Served": "Vector", "Discrete": "DiscreteMulti"}
        got = drive(harness, address, "v8", 2, agents=3, steps=30, wait_ms=2, also=also, models=models)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()
    by_name = {"Served": ("vector", 2, []), "Discrete": ("discrete-multi", 0, [3, 2, 5])}
    for behaviour, (name, continuous, branches) in by_name.items():
        agents = {agent for agent, b in got["behaviour"].items() if b == behaviour}
        own = {
            "sent": {agent: lines for agent, lines in got["sent"].items() if agent in agents},
            "applied": [a for a in got["applied"] if a[1] in agents],
        }
        assert agents and check_actions(name, own, continuous, branches) >= 10, (behaviour, got["logged"])


@contextlib.contextmanager
def fake_server(answer_delay_s=None, die_after=None, stall_after=None):
    """A TCP server on 127.0.0.1:0: None accepts and never answers; else a proxy to `upstream` (set later) that holds
    each answer `answer_delay_s` seconds and, after `die_after` answers, goes away as a killed server does (its
    connections closed, its port refusing), or after `stall_after` answer lines (the info line counted) sends half of
    the next line and then nothing, its connection open (state["stalled"] is set then)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    state = {"upstream": None, "held": [], "answers": 0, "stalled": threading.Event()}
    stop, dead = threading.Event(), threading.Event()

    def die():
        dead.set()
        listener.close()
        for s in state["held"]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def pump(src, dst, delay, answers):
        try:
            while not stop.is_set() and not dead.is_set():
                data = src.recv(1 << 16)
                if not data:
                    break
                time.sleep(delay)
                lines = data.count(b"\n") if answers else 0
                if lines and state["answers"] + lines >= (stall_after or float("inf")):
                    stall_mid_line(dst, data, stall_after - state["answers"], state["stalled"], stop)
                    break
                dst.sendall(data)
                state["answers"] += lines
                if lines and state["answers"] >= (die_after or float("inf")):
                    die()
        except OSError:
            pass

    def accept():
        while not stop.is_set() and not dead.is_set():
            try:
                conn = listener.accept()[0]
            except OSError:
                continue
            state["held"].append(conn)
            if answer_delay_s is not None:
                host, port = state["upstream"].rsplit(":", 1)
                up = socket.create_connection((host, int(port)))
                state["held"].append(up)
                threading.Thread(target=pump, args=(conn, up, 0, False), daemon=True).start()
                threading.Thread(target=pump, args=(up, conn, answer_delay_s, True), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1:%d" % listener.getsockname()[1], state
    finally:
        stop.set()
        thread.join(5)
        if not dead.is_set():
            die()


def test_a_silent_server_never_blocks_a_step_and_the_agents_act_on_zeros(harness):
    with fake_server() as (address, _):
        got = drive(harness, address, "v8", 2, agents=4, steps=40)
    assert len(got["step_ms"]) == 40 and max(got["step_ms"]) < NOT_BLOCKED_MS, got["step_ms"]
    assert got["applied"] and all(seq == -1 and cont == "0,0" for _, _, seq, cont, _ in got["applied"])


def test_a_late_server_s_answers_are_applied_when_they_arrive(harness):
    with server("lstm") as (_, upstream), fake_server(answer_delay_s=0.03) as (address, state):
        state["upstream"] = upstream
        got = drive(harness, address, "v10", 0, [4], agents=3, steps=40)
    assert max(got["step_ms"]) < NOT_BLOCKED_MS, got["step_ms"]
    answered = [a for a in got["applied"] if a[2] >= 0]
    assert answered and all(seq < step for step, _, seq, _, _ in answered)  # 30 ms late: never this step's answer
    assert check_actions("lstm", got, 0, [4]) == len(answered)  # each the answer to the line it answers


def test_a_server_that_goes_away_is_logged_once_and_retried_without_blocking(harness):
    """The server's connection closes after 60 answer lines (20 steps of 3 agents) and its port then refuses, as a
    killed server's does (tools/bench_unity_communicator.py kills a real one)."""
    with server("vector") as (_, upstream), fake_server(answer_delay_s=0, die_after=60) as (address, state):
        state["upstream"] = upstream
        got = drive(harness, address, "v8", 2, agents=3, steps=120)
    assert max(got["step_ms"]) < NOT_BLOCKED_MS, max(got["step_ms"])
    seqs = [seq for _, _, seq, _, _ in got["applied"]]
    # answered (20 batches at most: a step's batch may be replaced by the next while the thread is busy), then no more
    # answers, and the steps went on
    assert 0 < len({s for s in seqs if s >= 0}) <= 20 and got["applied"][-1][0] == 119
    assert min(step for step, _, seq, _, _ in got["applied"] if seq == max(seqs)) < 119 - 40
    failures = [line for line in got["logged"] if "retrying" in line]
    assert len(failures) == 1, got["logged"]  # once, not per step nor per retry
    assert check_actions("vector", got, 2, []) == len([s for s in seqs if s >= 0])


# What a steady step may allocate on the main thread, in all (bytes over the steps after the first 5): the buffer pool
# filling up once. Every step's requests, masks and action buffers are reused; today's 16 agents alone would be tens of
# KB a step.
STEADY_BYTES = 16 * 1024
# The communicator's own part of one step (its calls on the main thread, the sensors' writes included), not a speed
# target (that is the benchmark's): a call that waited on the stalled socket would take the read timeout (10 s).
NOT_STALLED_MS = 50.0


@pytest.mark.parametrize("name", ["vector", "visual-simple", "discrete-multi"])
def test_the_communicators_main_thread_allocates_nothing_in_a_steady_step(harness, name):
    """GC.GetAllocatedBytesForCurrentThread around each ICommunicator call the Academy makes (the harness'
    TimedCommunicator): no per-step garbage for the collector to stop the game for. (Attention is left out: ML-Agents'
    own ObservationWriter.SetTarget makes an int[] for a 2-D sensor, as it does for a trainer.)"""
    sensors, continuous, branches, masks, _, _ = CASES[name]
    with server(name) as (_, address):
        got = drive(harness, address, sensors, continuous, branches, masks, agents=16, steps=40)
    assert len(got["comm"]) == 40 and check_actions(name, got, continuous, branches) >= 10
    steady = [allocated for _, allocated, _ in got["comm"][5:]]
    assert sum(steady) < STEADY_BYTES, steady


def test_a_server_stalled_mid_line_holds_neither_a_step_nor_the_main_thread(harness):
    """The server answers 10 steps, then sends half a line and nothing more, its connection open: the background thread
    sits in a read for the rest of the run (seconds); the communicator's calls on the main thread never wait for it and
    allocate nothing meanwhile."""
    with server("vector") as (_, upstream), fake_server(answer_delay_s=0, stall_after=1 + 3 * 10) as (address, state):
        state["upstream"] = upstream
        got = drive(harness, address, "v8", 2, agents=3, steps=80)
        assert state["stalled"].is_set()
    seqs = [seq for _, _, seq, _, _ in got["applied"]]
    # answered (10 batches at most: a step's batch may be replaced by the next while the thread is busy), stalled, and
    # the steps went on: 40+ steps (20 ms of "frame" each) after the last answer arrived, the I/O thread in its read
    assert 0 < len({s for s in seqs if s >= 0}) <= 10 and got["applied"][-1][0] == 79
    last_answer_at = min(step for step, _, seq, _, _ in got["applied"] if seq == max(seqs))
    assert last_answer_at < 79 - 40, last_answer_at
    assert max(ms for ms, _, _ in got["comm"]) < NOT_STALLED_MS, got["comm"]
    assert sum(allocated for _, allocated, _ in got["comm"][5:]) < STEADY_BYTES
    assert check_actions("vector", got, 2, []) == len([s for s in seqs if s >= 0])


def test_the_communicator_the_sample_and_the_harness_compile_against_ml_agents_own_runtime_without_warnings(harness):
    """(the sample, Samples~/ServedPolicy, is compiled in the harness fixture: ML-Agents' real types, warnings as
    errors)"""
    assert "warning" not in harness["said"].lower(), harness["said"]


def test_the_samples_heuristic_only_fallback_acts_on_the_collected_vector_a_decision_late_without_blocking(harness):
    """No --mlagents-port: no communicator; Behavior Type Heuristic Only and the sample's ServedHeuristicAgent, whose
    Heuristic sends Agent.GetObservations() at the next step and applies the newest answer that has arrived."""
    with server("vector") as (_, address):
        got = drive(harness, address, "v8", 2, agents=3, steps=30, fallback=True, warm=1)
    assert not got["sent"] and max(got["step_ms"]) < NOT_BLOCKED_MS
    policy = inference.load(EXAMPLES / "vector")
    want = {key: np.ravel(policy.act(obs[0])["continuous_actions"]) for key, obs in got["wrote"].items()}
    acted = 0
    for step, agent, _, cont, _ in got["applied"]:
        values = np.array([float(v) for v in cont.split(",")], np.float32)
        if not values.any():
            continue  # before the first answer
        # the answer to an earlier step's observations (one decision late at best; how late, the machine's load
        # decides), never this step's
        earlier = [s for s in range(step) if np.allclose(values, want[s, agent], rtol=0, atol=1e-5)]
        assert earlier, (step, agent)
        acted += 1
    assert acted >= 5, acted


# -- the pinned copy of ML-Agents' runtime (tools/refresh_mlagents_runtime.py)

PINNED = ROOT / "clients" / "csharp" / "Tests~" / "MLAgentsRuntime"


def load_refresh():
    spec = importlib.util.spec_from_file_location(
        "refresh_mlagents_runtime", ROOT / "tools" / "refresh_mlagents_runtime.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pinned_runtime_is_the_packages_files_as_the_refresh_script_wrote_them():
    import hashlib

    lines = [line.split(" ", 2) for line in (PINNED / "MANIFEST.txt").read_text().splitlines()[1:]]
    assert len(lines) > 100 and (PINNED / "LICENSE.md").read_text().startswith(
        "ML Agents copyright © 2017 Unity Technologies"
    )
    lowered = (PINNED / "LOWERED.md").read_text()
    for package_sha, written_sha, path in lines:
        assert hashlib.sha256((PINNED / path).read_bytes()).hexdigest() == written_sha, path  # no edit by hand
        # a file differs from the package's only where the lowering says so
        assert (package_sha == written_sha) == (f"`{path}`" not in lowered), path
    assert {p.relative_to(PINNED).as_posix() for p in PINNED.rglob("*") if p.is_file()} == {
        *(path for _, _, path in lines),
        "MANIFEST.txt",
        "LOWERED.md",
    }


def test_the_lowering_rules_write_csharp_7_2_of_the_same_meaning():
    refresh = load_refresh()
    lower = refresh.lower
    text, rules = lower("X.cs", "            get { return shape.Length >= 4 ? shape[^2] : 1; }\n")
    assert text == "            get { return shape.Length >= 4 ? shape[shape.Length - 2] : 1; }\n" and len(rules) == 1
    source = (
        "        void F()\n"
        "        {\n"
        "            var model = M();\n"
        '            using var info = new Info(model, "{");\n'
        "            if (info.Ok)\n"
        "            {\n"
        "                G(info);\n"
        "            }\n"
        "        }\n"
    )
    want = (
        "        void F()\n"
        "        {\n"
        "            var model = M();\n"
        '            using (var info = new Info(model, "{"))\n'
        "            {\n"
        "            if (info.Ok)\n"
        "            {\n"
        "                G(info);\n"
        "            }\n"
        "            }\n"
        "        }\n"
    )
    assert lower("X.cs", source)[0] == want
    assert (
        lower("X.cs", "return shape.rank is >= 2 and < 4 ? 1 : 0;")[0]
        == "return (shape.rank >= 2 && shape.rank < 4) ? 1 : 0;"
    )
    pair = "            foreach (var (field, attr) in Fields(o))\n            {\n                Use(field, attr);\n"
    assert lower("X.cs", pair)[0] == (
        "            foreach (var field_attr in Fields(o))\n            {\n"
        "                var field = field_attr.Item1;\n                var attr = field_attr.Item2;\n"
        "                Use(field, attr);\n"
    )
    with pytest.raises(refresh.RefreshError):
        lower("X.cs", "switch (x) { case int n when n is > 3: break; }")


def test_the_refresh_script_refuses_a_folder_that_is_not_the_package_in_one_line(tmp_path):
    (tmp_path / "package.json").write_text('{"name": "com.unity.ml-agents", "version": "2.0.1"}')
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "refresh_mlagents_runtime.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert "2.0.1, not com.unity.ml-agents 3.0.0" in r.stderr
