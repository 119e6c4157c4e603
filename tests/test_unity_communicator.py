"""ServedCommunicator (clients/csharp/Runtime/Communicator/) compiled with Mono's mcs against ML-Agents' own runtime
(com.unity.ml-agents 3.0.0, the pinned copy in clients/csharp/Tests~/MLAgentsRuntime; only UnityEngine and Sentis are
stand-ins) and driven by the console harness (Tests~/UnityCommunicator/Harness.cs) through the real
Academy.EnvironmentStep against a live `--mode serve`: the actions the agents apply equal inference.load(...).act() on
the observations their sensors wrote, and a silent server never blocks a step.

Without `mcs`/`mono` the tests skip on a developer's machine and fail where CI is set (as test_csharp_client.py)."""

import socket
import subprocess
import threading

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT
from test_csharp_client import compile_cs, live_server, mono_tools

import inference

CLIENT = ROOT / "clients" / "csharp"
PINNED = CLIENT / "Tests~" / "MLAgentsRuntime"
HARNESS = CLIENT / "Tests~" / "UnityCommunicator"
NOT_BLOCKED_MS = 500.0


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    tools = mono_tools()
    if tools[0] == "skip":
        pytest.skip(tools[1])
    if tools[0] == "fail":
        pytest.fail(tools[1] + " (CI is set: .ci/run installs it)")
    mcs, mono = tools
    out = tmp_path_factory.mktemp("unity")
    protobuf = PINNED / "Plugins" / "Google.Protobuf_Packed.dll"
    (out / protobuf.name).write_bytes(protobuf.read_bytes())
    grpc = sorted((PINNED / "Runtime" / "Grpc").rglob("*.cs"))
    messages = out / "Unity.ML-Agents.CommunicatorObjects.dll"
    lenient = ["-nowarn:1591", "-nologo"]  # ML-Agents' own code: compiled as it is, its warnings not ours
    run = lambda args: subprocess.run([mcs, *args], capture_output=True, text=True, timeout=300)  # noqa: E731
    r = run([*lenient, "-target:library", f"-out:{messages}", f"-r:{protobuf}", *map(str, grpc)])
    assert r.returncode == 0, r.stdout + r.stderr
    engine = out / "UnityEngine.dll"
    compile_cs(mcs, engine, [HARNESS / "UnityEngineStandIns.cs"], "-target:library")
    sentis = out / "Unity.Sentis.dll"
    compile_cs(mcs, sentis, [HARNESS / "SentisStandIns.cs"], "-target:library", f"-r:{engine}")
    mla = out / "Unity.ML-Agents.dll"
    runtime = sorted(p for p in (PINNED / "Runtime").rglob("*.cs") if "Grpc" not in p.parts)
    refs = [f"-r:{p}" for p in (protobuf, messages, engine, sentis)] + [
        "-r:System.Runtime.Serialization",
        "-r:System.Xml",
    ]
    r = run([*lenient, "-langversion:7.2", "-target:library", f"-out:{mla}", *refs, *map(str, runtime)])
    assert r.returncode == 0, r.stdout + r.stderr
    client = out / "MLAgentsInference.Client.dll"
    compile_cs(mcs, client, sorted((CLIENT / "Runtime").glob("*.cs")), "-target:library")
    served = out / "MLAgentsInference.Communicator.dll"
    said = compile_cs(
        mcs,
        served,
        sorted((CLIENT / "Runtime" / "Communicator").glob("*.cs")),
        "-target:library",
        f"-r:{client}",
        f"-r:{mla}",
        f"-r:{engine}",
    )
    assert "warning" not in said.lower(), said
    exe = out / "Harness.exe"
    compile_cs(mcs, exe, [HARNESS / "Harness.cs"], *(f"-r:{p}" for p in (client, mla, engine, served)))
    return {"mono": mono, "exe": exe, "dir": out}


def drive(harness, address, sizes, continuous, branches, masks, agents, steps, episode=0, churn=0, wait_ms=2):
    out = harness["dir"] / "run.txt"
    args = [",".join(map(str, sizes)), continuous, ",".join(map(str, branches)) or "-", int(masks), agents, steps]
    args += [episode, churn, wait_ms, out]
    r = subprocess.run(
        [harness["mono"], str(harness["exe"]), "--mlagents-port", "1", address, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and "DONE" in r.stdout, (r.stdout[-2000:], r.stderr[-3000:])
    sent, applied, step_ms = {}, [], []
    for line in out.read_text().splitlines():
        kind, *rest = line.split(" ")
        if kind == "SENT":
            seq, agent, reset, obs, mask = rest
            arrays = [np.array([float(v) for v in part.split(",")], np.float32) for part in obs.split(";")]
            sent.setdefault(int(agent), []).append(
                (int(seq), reset == "reset", arrays, None if mask == "-" else [int(v) for v in mask.split(",")])
            )
        elif kind == "APPLIED":
            step, agent, seq, cont, disc = rest
            applied.append((int(step), int(agent), int(seq), cont, disc))
        elif kind == "STEP":
            step_ms.append(float(rest[1]))
    return sent, applied, step_ms, r.stderr


def replay(name, sent):
    """(agent, seq) -> the local policy's answer to that line, each agent's memory carried as the server carries it."""
    policy = inference.load(EXAMPLES / name)
    want = {}
    for agent, lines in sent.items():
        memory = None
        for seq, reset, arrays, mask in sorted(lines, key=lambda x: x[0]):
            if reset:
                memory = None
            obs = arrays[0] if len(arrays) == 1 else arrays
            out = policy.act(obs, action_masks=mask, deterministic=True, memory=memory)
            memory = out.get("memory")
            want[agent, seq] = out
    return want


CASES = {  # example: (vector sizes, continuous, branches, masks, episode length)
    "vector": ([8], 2, [], False, 0),
    "discrete-multi": ([20, 6], 0, [3, 2, 5], True, 0),
    "lstm": ([10], 0, [4], False, 4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_actions_applied_through_the_real_step_loop_equal_the_local_policys(harness, name):
    sizes, continuous, branches, masks, episode = CASES[name]
    with live_server(EXAMPLES / name) as address:
        sent, applied, _, said = drive(harness, address, sizes, continuous, branches, masks, 3, 30, episode)
    want = replay(name, sent)
    answered = [a for a in applied if a[2] >= 0]
    assert len(answered) >= 3 * 15, (len(answered), said[-2000:])  # most steps were answered
    for step, agent, seq, cont, disc in answered:
        out = want[agent, seq]
        if continuous:
            got = np.array([float(v) for v in cont.split(",")], np.float32)
            assert np.allclose(got, np.ravel(out["continuous_actions"]), rtol=0, atol=1e-5), (step, agent)
        if branches:
            got = [int(v) for v in disc.split(",")]
            assert got == [int(v) for v in np.ravel(out["discrete_actions"])], (step, agent)
    if masks:  # no masked action was taken
        lines = {(agent, seq): mask for agent, ls in sent.items() for seq, _, _, mask in ls}
        for step, agent, seq, cont, disc in answered:
            mask, offset = lines[agent, seq], 0
            for branch, action in zip(branches, map(int, disc.split(","))):
                assert mask[offset + action] == 1
                offset += branch
    if episode:  # the episode ends reset the agents' memories on the server
        assert any(reset for lines in sent.values() for _, reset, _, _ in lines)


def test_a_silent_server_never_blocks_a_step(harness):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held, stop = [], threading.Event()

    def accept():  # accepts, never answers
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        address = "127.0.0.1:%d" % listener.getsockname()[1]
        _, applied, step_ms, _ = drive(harness, address, [8], 2, [], False, 4, 40)
    finally:
        stop.set()
        thread.join(5)
        for s in held:
            s.close()
        listener.close()
    assert len(step_ms) == 40
    # Not a speed target (those belong in benchmarks): a step that waited on the socket would take the read timeout
    # (10 s) or the connect timeout (1 s); none comes near either. The first step also JIT-compiles ML-Agents' types.
    assert max(step_ms) < NOT_BLOCKED_MS, step_ms
    assert all(seq == -1 for _, _, seq, _, _ in applied)  # no answer: zero actions
