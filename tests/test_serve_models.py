"""serve holding several models (issue 44): the behaviours of run folders, each a model named by its behaviour name,
its versions its checkpoints' steps (services.repository), answered over JSON lines, V2 REST and V2 gRPC side by side.
Every answer names its model and version and equals `inference.load(<that checkpoint>).act()` within 1e-5 (a
reference this code does not compute: the checkpoint loaded on its own). Passes are shared between models by count:
a flooded model does not starve another. The servers are real (fronts.serve.serving on real sockets, or the batcher
with the real owners of POST /v1/act in a real event loop); nothing is mocked; nothing is timed."""

import asyncio
import http.client
import json
import os
import select
import signal
import subprocess
import time

import numpy as np
import pytest
from conftest import (
    EXAMPLES,
    cli,
    copy_run,
    dial,
    exchange,
    list_checkpoint,
    refused,
    run,
    serve_process,
    two_behaviour_run,
    write_checkpoint,
)

import inference as I
from mlagents_inference.fronts.serve import Server, serving
from mlagents_inference.services.batcher import HttpLine, ServeOptions
from mlagents_inference.services.repository import Repository

grpc = pytest.importorskip("grpc")
pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")
pb = pytest.importorskip("tritonclient.grpc.service_pb2")
service_pb2_grpc = pytest.importorskip("tritonclient.grpc.service_pb2_grpc")

TOL = 1e-5
GRPC_OPTIONS = [("grpc.enable_http_proxy", 0)]


def vector_obs(rows: int, seed: int) -> np.ndarray:
    return np.random.RandomState(seed).uniform(-1, 1, (rows, 8)).astype(np.float32)


def hybrid_obs(rows: int, seed: int) -> np.ndarray:
    return np.random.RandomState(seed).uniform(-1, 1, (rows, 12)).astype(np.float32)


def rest(where: str, method: str, path: str, body=None) -> tuple:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode())
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        conn.close()


def rest_infer(where: str, model: str, obs: np.ndarray, version: str = "") -> tuple:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    body = {"inputs": [{"name": "obs_0", "datatype": "FP32", "shape": list(obs.shape), "data": obs.ravel().tolist()}]}
    return rest(where, "POST", path, body)


def rest_output(answer: dict, name: str) -> np.ndarray:
    out = next(o for o in answer["outputs"] if o["name"] == name)
    return np.asarray(out["data"], np.float64).reshape(out["shape"])


def grpc_infer(stub, model: str, obs: np.ndarray, version: str = ""):
    request = pb.ModelInferRequest(model_name=model, model_version=version)
    request.inputs.add(name="obs_0", datatype="FP32", shape=list(obs.shape))
    request.raw_input_contents.append(np.ascontiguousarray(obs, "<f4").tobytes())
    return stub.ModelInfer(request, timeout=60)


def grpc_output(response, name: str) -> np.ndarray:
    n = [o.name for o in response.outputs].index(name)
    tensor = response.outputs[n]
    dtype = np.dtype("<f4") if tensor.datatype == "FP32" else np.dtype("<i8")
    return np.frombuffer(response.raw_output_contents[n], dtype).reshape(list(tensor.shape))


@pytest.fixture(scope="module")
def two_run(tmp_path_factory):
    return two_behaviour_run(tmp_path_factory.mktemp("models"))


def test_two_behaviours_of_one_run_answer_side_by_side_over_lines_rest_and_grpc(two_run):
    vector = I.load(two_run / "Vector" / "Vector-100000.pt")  # (the newest of each: what serves)
    hybrid = I.load(two_run / "Hybrid" / "Hybrid-40000.pt")
    vo, ho = vector_obs(6, 1), hybrid_obs(6, 2)
    want_v, want_h = vector.act(vo), hybrid.act(ho)
    repo = Repository([two_run])
    repo.poll()
    with serving(None, ServeOptions(), repo, listen="127.0.0.1:0", http="127.0.0.1:0", grpc="127.0.0.1:0") as said:
        lines = []
        for i in range(6):  # interleaved on one connection: answered in order, each by its own model
            lines.append({"id": f"v{i}", "model": "Vector", "obs": vo[i].tolist()})
            lines.append({"id": f"h{i}", "model": "Hybrid", "obs": ho[i].tolist()})
        lines += [{"id": "none", "obs": vo[0].tolist()}, {"id": "other", "model": "Keeper", "obs": vo[0].tolist()}]
        lines.append({"id": "last", "model": "Vector", "obs": vo[5].tolist()})
        with dial(said["listen"]) as sock:
            got = exchange(sock, lines)
        by_v1 = rest(said["http"], "POST", "/v1/act", {"id": "p", "model": "Hybrid", "obs": ho[3].tolist()})
        status_v, rest_v = rest_infer(said["http"], "Vector", vo)
        status_h, rest_h = rest_infer(said["http"], "Hybrid", ho, "40000")
        with grpc.insecure_channel(said["grpc"], options=GRPC_OPTIONS) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            grpc_v, grpc_h = grpc_infer(stub, "Vector", vo), grpc_infer(stub, "Hybrid", ho)
        host, port = said["http"].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.request("GET", "/metrics")
        metrics = conn.getresponse().read().decode()
        conn.close()
    # 7 lines (the last one too) and 2 V2 requests of Vector, 7 lines (POST /v1/act's too) and 2 of Hybrid
    assert 'mlagents_serve_model_lines_total{model="Vector",version="100000"} 9.0' in metrics
    assert 'mlagents_serve_model_lines_total{model="Hybrid",version="40000"} 9.0' in metrics
    assert 'mlagents_serve_model_batch_lines_count{model="Hybrid",version="40000"}' in metrics
    assert [a["id"] for a in got] == [line["id"] for line in lines]
    for i in range(6):
        v, h = got[2 * i], got[2 * i + 1]
        assert (v["model"], v["version"], h["model"], h["version"]) == ("Vector", "100000", "Hybrid", "40000")
        assert np.abs(np.asarray(v["continuous_actions"]) - want_v["continuous_actions"][i]).max() <= TOL
        assert np.abs(np.asarray(h["continuous_actions"]) - want_h["continuous_actions"][i]).max() <= TOL
        assert h["discrete_actions"] == want_h["discrete_actions"][i].tolist()
    assert got[12] == {"id": "none", "error": "name the model: 2 are served (Hybrid, Vector)"}
    assert got[13]["error"].startswith("model Keeper: not served (served: Hybrid, Vector)") and "model" not in got[13]
    assert got[14]["model"] == "Vector" and "error" not in got[14]  # (the connection goes on)
    assert by_v1[0] == 200 and by_v1[1] == {**got[7], "id": "p"}  # (POST /v1/act: the line Hybrid answered)
    assert status_v == status_h == 200
    assert (rest_v["model_name"], rest_v["model_version"]) == ("Vector", "100000")
    assert (rest_h["model_name"], rest_h["model_version"]) == ("Hybrid", "40000")
    assert np.abs(rest_output(rest_v, "deterministic_continuous_actions") - want_v["continuous_actions"]).max() <= TOL
    assert np.abs(rest_output(rest_h, "deterministic_continuous_actions") - want_h["continuous_actions"]).max() <= TOL
    assert (grpc_v.model_name, grpc_v.model_version, grpc_h.model_name, grpc_h.model_version) == (
        "Vector",
        "100000",
        "Hybrid",
        "40000",
    )
    assert np.abs(grpc_output(grpc_v, "deterministic_continuous_actions") - want_v["continuous_actions"]).max() <= TOL
    assert (grpc_output(grpc_h, "deterministic_discrete_actions") == want_h["discrete_actions"]).all()


def test_a_request_may_name_a_loaded_version_and_each_answer_says_which(two_run):
    old, new = I.load(two_run / "Vector" / "Vector-50000.pt"), I.load(two_run / "Vector" / "Vector-100000.pt")
    obs = vector_obs(4, 3)
    want_old, want_new = old.act(obs)["continuous_actions"], new.act(obs)["continuous_actions"]
    assert np.abs(want_old - want_new).max() > 1e-3  # (two versions that answer apart)
    repo = Repository([two_run], versions=2)
    repo.poll()
    with serving(None, ServeOptions(), repo, listen="127.0.0.1:0", http="127.0.0.1:0") as said:
        lines = [{"id": 0, "model": "Vector", "version": 50000, "obs": obs[0].tolist()}]
        lines += [{"id": 1, "model": "Vector", "version": "100000", "obs": obs[1].tolist()}]
        lines += [{"id": 2, "model": "Vector", "obs": obs[2].tolist()}]
        lines += [{"id": 3, "model": "Vector", "version": 70000, "obs": obs[3].tolist()}]
        with dial(said["listen"]) as sock:
            got = exchange(sock, lines)
        _, by_rest = rest_infer(said["http"], "Vector", obs, "50000")
        status, meta = rest(said["http"], "GET", "/v2/models/Vector/versions/50000")
        missing, refusal = rest(said["http"], "GET", "/v2/models/Vector/versions/70000")
        stats = rest(said["http"], "GET", "/v2/models/stats")[1]
    assert [(a["model"], a["version"]) for a in got[:3]] == [("Vector", "50000"), ("Vector", "100000")] + [
        ("Vector", "100000")
    ]
    assert np.abs(np.asarray(got[0]["continuous_actions"]) - want_old[0]).max() <= TOL
    assert np.abs(np.asarray(got[1]["continuous_actions"]) - want_new[1]).max() <= TOL
    assert np.abs(np.asarray(got[2]["continuous_actions"]) - want_new[2]).max() <= TOL
    assert got[3] == {"id": 3, "error": "model Vector: version 70000 is not loaded (loaded: 50000, 100000)"}
    assert by_rest["model_version"] == "50000"
    assert np.abs(rest_output(by_rest, "deterministic_continuous_actions") - want_old).max() <= TOL
    assert status == 200 and meta["name"] == "Vector"
    assert missing == 404 and "70000" in refusal["error"]
    rows = {(m["name"], m["version"]): m for m in stats["model_stats"]}
    assert set(rows) == {("Vector", "50000"), ("Vector", "100000"), ("Hybrid", "40000")}
    assert rows[("Vector", "50000")]["inference_count"] == 4 and rows[("Vector", "100000")]["inference_count"] == 0


def test_a_flooded_model_does_not_starve_another():
    """Model A is sent 400 lines at once (--max-batch 4: 100 passes of its own); one line of model B, sent after
    them, is answered within the first two passes; every pass runs at most --max-batch lines of each model, in one
    engine call per model."""
    a, b = I.load(EXAMPLES / "vector"), I.load(EXAMPLES / "hybrid")
    server = Server(None, ServeOptions(max_batch=4), {"A": ([("1", a)], "1"), "B": ([("1", b)], "1")})
    loop = asyncio.new_event_loop()
    server.loop, server.done = loop, loop.create_future()
    answered_at: dict = {}
    seen: list = []
    pass_lines = server._answers  # (counted as each pass runs: its lines per model)

    def counting(lines, scopes, info):
        answers = pass_lines(lines, scopes, info)
        per = {}
        for answer in answers:
            per[answer.get("model")] = per.get(answer.get("model"), 0) + 1
        seen.append(per)
        return answers

    server._answers = counting
    calls = {"A": 0, "B": 0}
    for name, policy in (("A", a), ("B", b)):  # (the real engines, their calls counted)
        engine_run = policy.engine.run

        def counted(*args, name=name, engine_run=engine_run, **kwargs):
            calls[name] += 1
            return engine_run(*args, **kwargs)

        policy.engine.run = counted

    def send(model: str, obs, key):
        line = HttpLine(json.dumps({"id": key, "model": model, "obs": obs}).encode(), loop.create_future())
        line.future.add_done_callback(lambda _: answered_at.setdefault(key, server.passes))
        server.waiting(line, 1)
        return line

    async def flood():
        lines = [send("A", [0.1 * (i % 7)] * 8, f"a{i}") for i in range(400)]
        lines.append(send("B", [0.2] * 12, "b"))
        return [await line.future for line in lines]

    try:
        got = loop.run_until_complete(flood())
    finally:
        loop.close()
    assert all("error" not in answer for _, answer in got)
    assert answered_at["b"] <= 2  # (within two passes, while A takes 100)
    assert max(answered_at[f"a{i}"] for i in range(400)) >= 100
    assert all(n <= 4 for per in seen for n in per.values())
    assert calls == {"A": sum("A" in per for per in seen), "B": 1}  # (one engine call per model per pass)
    assert [answer["model"] for _, answer in got] == ["A"] * 400 + ["B"]


def without_newest(tmp_path, example: str, behavior: str, step: int):
    """A copy of examples/<example> as a run still training: its checkpoint `step` held back (moved aside, its
    record taken out of training_status.json), to be written into it later as mlagents-learn would."""
    import shutil

    run = copy_run(EXAMPLES / example, tmp_path, "run")
    held = tmp_path / f"{behavior}-{step}.pt"
    shutil.move(run / behavior / f"{behavior}-{step}.pt", held)
    status_file = run / "run_logs" / "training_status.json"
    status = json.loads(status_file.read_text())
    status[behavior]["checkpoints"] = [c for c in status[behavior]["checkpoints"] if c["steps"] != step]
    status_file.write_text(json.dumps(status, indent=4))
    return run, held


def keep_asking(kind: str, said: dict, obs: np.ndarray, got: list, stop) -> None:
    """One client asking Vector again and again (JSON lines, REST or gRPC) until `stop`: (version, actions or error)
    appended to `got` (this client's own list)."""
    if kind == "lines":
        sock = dial(said["listen"])
    elif kind == "grpc":
        channel = grpc.insecure_channel(said["grpc"], options=GRPC_OPTIONS)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        for i in range(20000):  # (bounded; stopped once the last version has answered)
            if stop.is_set() and i % 10 == 0:
                return
            if kind == "lines":
                a = exchange(sock, [{"id": i, "model": "Vector", "obs": obs[0].tolist()}])[0]
                got.append((a.get("version"), a.get("error") or np.asarray(a["continuous_actions"])[None]))
            elif kind == "rest":
                status, a = rest_infer(said["http"], "Vector", obs)
                got.append(
                    (a.get("model_version"), a.get("error") or rest_output(a, "deterministic_continuous_actions"))
                )
            else:
                r = grpc_infer(stub, "Vector", obs)
                got.append((r.model_version, grpc_output(r, "deterministic_continuous_actions")))
    finally:
        if kind == "lines":
            sock.close()
        elif kind == "grpc":
            channel.close()


class Lines(list):
    def __call__(self, line: str) -> None:
        assert "\n" not in line
        self.append(line)


def test_following_a_run_swaps_in_each_finished_checkpoint_while_clients_keep_asking(tmp_path):
    """mlagents-learn's way: the .pt (and .onnx) first, training_status.json after. 64 clients (22 JSON lines, 21 REST,
    21 gRPC) keep asking throughout: every answer equals load(<the checkpoint it names>).act(), none is refused. Then a
    truncated .pt, a corrupt .onnx and a checkpoint that fails onnx-compare each leave the version serving, with one
    log line each."""
    import shutil
    import threading

    run, held = without_newest(tmp_path, "vector", "Vector", 100000)
    obs = vector_obs(1, 5)
    scaled_source = EXAMPLES / "vector" / "Vector" / "Vector-100000.pt"
    log = Lines()
    repo = Repository([run], poll_s=0.05, log=log)
    repo.poll()
    answers = {"lines": [[] for _ in range(22)], "rest": [[] for _ in range(21)], "grpc": [[] for _ in range(21)]}
    stop = threading.Event()

    def seen(version: str) -> bool:
        return all(any(v == version for v, _ in got[-5:]) for each in answers.values() for got in each)

    def wait_for(version: str) -> None:
        for _ in range(6000):  # (bounded: at most about a minute)
            if seen(version):
                return
            stop.wait(0.01)
        raise AssertionError(f"version {version} never answered every client: {log}")

    with serving(
        None, ServeOptions(), repo, follow=True, listen="127.0.0.1:0", http="127.0.0.1:0", grpc="127.0.0.1:0"
    ) as said:
        clients = [  # (64 clients, as issue 44 asks: 22 on JSON lines, 21 on V2 REST, 21 on V2 gRPC)
            threading.Thread(target=keep_asking, args=(kind, said, obs, got, stop))
            for kind, each in answers.items()
            for got in each
        ]
        for client in clients:
            client.start()
        try:
            wait_for("50000")
            shutil.copyfile(held, run / "Vector" / "Vector-100000.pt")  # (the final one: Vector.onnx is its ONNX)
            list_checkpoint(run, "Vector", 100000)
            wait_for("100000")
            write_checkpoint(run, "Vector", 150000, scaled_source, scale=1.5)
            wait_for("150000")
        finally:
            stop.set()
            for client in clients:
                client.join(120)
        (run / "Vector" / "Vector-200000.pt").write_bytes(held.read_bytes()[:5000])  # truncated
        list_checkpoint(run, "Vector", 200000)
        write_checkpoint(run, "Vector", 250000, scaled_source, scale=1.2, listed=False)  # (listed once whole: the
        (run / "Vector" / "Vector-250000.onnx").write_bytes(b"not an onnx file")  # corrupt ONNX beside it
        list_checkpoint(run, "Vector", 250000)  # follower must not see it listed without its ONNX)
        onnx_50000 = run / "Vector" / "Vector-50000.onnx"
        write_checkpoint(run, "Vector", 300000, scaled_source, scale=2.0, onnx=onnx_50000)  # fails onnx-compare
        for _ in range(3):
            repo.poll()
        with dial(said["listen"]) as sock:
            after = exchange(sock, [{"id": "after", "model": "Vector", "obs": obs[0].tolist()}])[0]
    want = {
        "50000": I.load(run / "Vector" / "Vector-50000.pt").act(obs)["continuous_actions"],
        "100000": I.load(run / "Vector" / "Vector-100000.pt").act(obs)["continuous_actions"],
        "150000": I.load(run / "Vector" / "Vector-150000.pt").act(obs)["continuous_actions"],
    }
    assert np.abs(want["150000"] - want["100000"]).max() > 1e-3 and np.abs(want["100000"] - want["50000"]).max() > 1e-3
    assert sum(map(len, answers.values())) == len(clients) == 64
    for kind, each in answers.items():
        for got in each:  # (each client's answers, in the order it got them)
            assert got and all(v in want for v, _ in got), (kind, [v for v, _ in got if v not in want][:3])
            for version, actions in got:
                assert np.abs(np.asarray(actions) - want[version]).max() <= TOL, (kind, version)
            versions = [v for v, _ in got]
            assert sorted(set(versions), key=int) == ["50000", "100000", "150000"]
            assert versions == sorted(versions, key=int)  # (a client never goes back to an older version)
    refused = [line for line in log if "not served" in line]
    assert len(refused) == 3, log
    for step, why in (
        ("200000", "damaged/truncated"),
        ("250000", "Vector-250000.onnx: not an ONNX file"),
        ("300000", "differs from Vector-300000.onnx"),
    ):
        (line,) = [x for x in refused if f"Vector-{step}.pt" in x]
        assert why in line and "version 150000 keeps answering" in line
    assert after["version"] == "150000" and "error" not in after


def rollout(policy, steps: np.ndarray, memory=None) -> tuple:
    """A local rollout of one agent: each step's (discrete actions, next memory), from `memory` (zeros)."""
    out = []
    for obs in steps:
        got = policy.act(obs[None], memory=memory)
        memory = got["memory"]
        out.append((got["discrete_actions"][0].tolist(), memory[0]))
    return out


def test_lstm_agents_and_sequences_keep_their_version_across_a_swap_and_are_refused_once_it_is_unloaded(tmp_path):
    """Memory (an LSTM) serves 50000; 8 agents (JSON lines) and 8 V2 sequences start on it; 100000 is swapped in
    (--versions 2: both loaded). The 8 agents and the 8 sequences go on on 50000, 8 new agents and 4 new sequences
    start on 100000, a reset agent moves to 100000, each equal to its local rollout. Once 50000 is unloaded, an old
    agent's line and an old sequence's request are refused in one line each, never continued on 100000."""
    import shutil

    run, held = without_newest(tmp_path, "lstm", "Memory", 100000)
    old, new = I.load(run / "Memory" / "Memory-50000.pt"), I.load(held)
    steps = np.random.RandomState(9).uniform(-1, 1, (28, 6, 10)).astype(np.float32)  # (agent, step, obs)
    repo = Repository([run], versions=2)
    repo.poll()

    def line(agent: int, t: int, **extra) -> dict:
        return {"id": agent, "model": "Memory", "obs": steps[agent % 24, t].tolist(), **extra}

    def sequence(where: str, agent: int, t: int, start: bool = False) -> tuple:
        body = {
            "parameters": {"sequence_id": f"runner {agent}", "sequence_start": start},
            "inputs": [{"name": "obs_0", "datatype": "FP32", "shape": [1, 10], "data": steps[agent, t].tolist()}],
        }
        return rest(where, "POST", "/v2/models/Memory/infer", body)

    with serving(None, ServeOptions(), repo, listen="127.0.0.1:0", http="127.0.0.1:0") as said:
        with dial(said["listen"]) as sock:
            before = [exchange(sock, [line(a, t) for a in range(8)]) for t in range(3)]
            seq_before = [[sequence(said["http"], a, t, start=t == 0) for a in range(16, 24)] for t in range(3)]
            shutil.copyfile(held, run / "Memory" / "Memory-100000.pt")  # (the final one: Memory.onnx is its ONNX)
            list_checkpoint(run, "Memory", 100000)
            repo.poll()  # (its swap reaches the server's loop before any line sent after it)
            after = [exchange(sock, [line(a, t) for a in range(8)]) for t in range(3, 6)]
            fresh = [exchange(sock, [line(a, t) for a in range(8, 16)]) for t in range(3)]
            reset = exchange(sock, [line(0, 0, reset=True)])[0]
            seq_after = [[sequence(said["http"], a, t) for a in range(16, 24)] for t in range(3, 6)]
            seq_fresh = [[sequence(said["http"], a, t, start=t == 0) for a in range(24, 28)] for t in range(3)]
            repo.unload("Memory", 50000)
            refused = exchange(sock, [line(1, 6 % 6)])[0]
            seq_refused = sequence(said["http"], 23, 0)
            again = exchange(sock, [line(1, 0, reset=True)])[0]
    old_runs = [rollout(old, steps[a]) for a in range(8)]
    for t, answers in enumerate(before + after):
        for a, answer in enumerate(answers):
            assert (answer["model"], answer["version"]) == ("Memory", "50000"), answer
            assert answer["discrete_actions"] == old_runs[a][t][0]
            assert np.abs(np.asarray(answer["memory"]) - old_runs[a][t][1]).max() <= TOL
    for t, answers in enumerate(fresh):
        for a, answer in enumerate(answers):
            want = rollout(new, steps[8 + a, :3])[t]
            assert answer["version"] == "100000" and answer["discrete_actions"] == want[0]
            assert np.abs(np.asarray(answer["memory"]) - want[1]).max() <= TOL
    assert reset["version"] == "100000"
    assert np.abs(np.asarray(reset["memory"]) - rollout(new, steps[0, :1])[0][1]).max() <= TOL
    for policy, version, agents, rows in (
        (old, "50000", range(16, 24), seq_before + seq_after),
        (new, "100000", range(24, 28), seq_fresh),
    ):
        wants = {a: rollout(policy, steps[a, : len(rows)]) for a in agents}
        for t, row in enumerate(rows):
            for a, (status, answer) in zip(agents, row):
                assert (status, answer["model_version"]) == (200, version), (a, t, answer)
                assert np.abs(rest_output(answer, "recurrent_out").reshape(-1) - wants[a][t][1]).max() <= TOL
    says = 'agent 1: its version 50000 of Memory was unloaded: send "reset": true to start again on version 100000'
    assert refused == {"id": 1, "error": says}
    assert seq_refused[0] == 400 and seq_refused[1]["error"].startswith(
        'sequence "runner 23": its version 50000 of Memory was unloaded: send sequence_start'
    )
    assert again["version"] == "100000" and "error" not in again


def other_memory_size(run, step: int, half: int = 12):
    """Memory-<step>.pt as a run whose LSTM was made smaller (memory size 2 x `half`, not 32) would write it: Memory's
    50000 with the LSTM and the head after it drawn anew (seeded), no ONNX beside it (none to compare with)."""
    import torch

    obj = torch.load(run / "Memory" / "Memory-50000.pt", map_location="cpu", weights_only=True)
    policy, rng = obj["Policy"], torch.Generator().manual_seed(step)
    shapes = {
        "network_body.lstm.lstm.weight_ih_l0": (4 * half, 32),
        "network_body.lstm.lstm.weight_hh_l0": (4 * half, half),
        "network_body.lstm.lstm.bias_ih_l0": (4 * half,),
        "network_body.lstm.lstm.bias_hh_l0": (4 * half,),
        "action_model._discrete_distribution.branches.0.weight": (4, half),
    }
    for key, shape in shapes.items():
        policy[key] = torch.randn(*shape, generator=rng) * 0.3
    policy["memory_size_vector"] = torch.tensor([float(2 * half)])
    obj["global_step"] = {"_GlobalSteps__global_step": torch.tensor([step])}
    torch.save(obj, run / "Memory" / f"Memory-{step}.pt")
    list_checkpoint(run, "Memory", step)
    return run / "Memory" / f"Memory-{step}.pt"


def test_versions_whose_memory_sizes_differ_never_share_memories(tmp_path):
    """Memory serves 100000 (memory size 32); 150000, memory size 24, is swapped in (--versions 2). An agent (JSON
    lines) and a V2 sequence started on 100000: the agent goes on on 100000 with its 32 numbers; the sequence, its
    request read for the serving version's inputs, is refused in one line naming both versions, goes on on 100000
    when it names it, and starts again on 150000 with sequence_start; a new agent starts on 150000 with 24. Each
    answer equals its local rollout."""
    run = copy_run(EXAMPLES / "lstm", tmp_path, "run")
    old = I.load(run / "Memory" / "Memory-100000.pt")
    steps = np.random.RandomState(11).uniform(-1, 1, (3, 6, 10)).astype(np.float32)  # (agent, step, obs)
    repo = Repository([run], versions=2)
    repo.poll()

    def sequence(where: str, t: int, start: bool = False, version: str = "") -> tuple:
        path = "/v2/models/Memory" + (f"/versions/{version}" if version else "") + "/infer"
        body = {
            "parameters": {"sequence_id": "runner", "sequence_start": start},
            "inputs": [{"name": "obs_0", "datatype": "FP32", "shape": [1, 10], "data": steps[1, t].tolist()}],
        }
        return rest(where, "POST", path, body)

    with serving(None, ServeOptions(), repo, listen="127.0.0.1:0", http="127.0.0.1:0") as said:
        with dial(said["listen"]) as sock:
            agent = [exchange(sock, [{"id": 0, "obs": steps[0, t].tolist()}])[0] for t in range(2)]
            seq = [sequence(said["http"], t, start=t == 0) for t in range(2)]
            new = I.load(other_memory_size(run, 150000))
            repo.poll()  # (its swap reaches the server's loop before any line sent after it)
            agent += [exchange(sock, [{"id": 0, "obs": steps[0, t].tolist()}])[0] for t in range(2, 4)]
            fresh = [exchange(sock, [{"id": 2, "obs": steps[2, t].tolist()}])[0] for t in range(2)]
            refused = sequence(said["http"], 2)
            named = sequence(said["http"], 2, version="100000")
            again = sequence(said["http"], 0, start=True)
    assert (old.settings.memory_size, new.settings.memory_size) == (32, 24)
    for t, (answer, want) in enumerate(zip(agent, rollout(old, steps[0, :4]))):
        assert (answer["version"], len(answer["memory"])) == ("100000", 32), (t, answer)
        assert answer["discrete_actions"] == want[0] and np.abs(np.asarray(answer["memory"]) - want[1]).max() <= TOL
    for answer, want in zip(fresh, rollout(new, steps[2, :2])):
        assert (answer["version"], len(answer["memory"])) == ("150000", 24), answer
        assert answer["discrete_actions"] == want[0] and np.abs(np.asarray(answer["memory"]) - want[1]).max() <= TOL
    seq_want = rollout(old, steps[1, :3])
    for t, (status, answer) in enumerate([*seq, named]):
        assert (status, answer["model_version"]) == (200, "100000"), answer
        assert np.abs(rest_output(answer, "recurrent_out").reshape(-1) - seq_want[t][1]).max() <= TOL
    says = (
        'sequence "runner": it started on version 100000 of Memory, whose memory size differs from version '
        "150000's: name version 100000, or send sequence_start to start again on 150000"
    )
    assert refused == (400, {"error": says})
    assert again[0] == 200 and again[1]["model_version"] == "150000"
    out = rest_output(again[1], "recurrent_out").reshape(-1)
    assert len(out) == 24 and np.abs(out - rollout(new, steps[1, :1])[0][1]).max() <= TOL


def grpc_refusal(call) -> tuple:
    with pytest.raises(grpc.RpcError) as exc:
        call()
    return exc.value.code(), exc.value.details()


def test_the_repository_api_is_refused_in_one_line_without_allow_model_control(two_run):
    repo = Repository([two_run])
    repo.poll()
    with serving(None, ServeOptions(), repo, http="127.0.0.1:0", grpc="127.0.0.1:0") as said:
        rest_calls = [
            rest(said["http"], "POST", "/v2/repository/index"),
            rest(said["http"], "POST", "/v2/repository/models/Vector/load"),
            rest(said["http"], "POST", "/v2/repository/models/Vector/unload", {"parameters": {"version": "100000"}}),
        ]
        with grpc.insecure_channel(said["grpc"], options=GRPC_OPTIONS) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            grpc_calls = [
                grpc_refusal(lambda: stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=60)),
                grpc_refusal(lambda: stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="Vector"))),
                grpc_refusal(lambda: stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="Vector"))),
            ]
        _, still = rest_infer(said["http"], "Vector", vector_obs(1, 0))
    says = "the repository API is off: start serve with --allow-model-control to load and unload"
    assert rest_calls == [(403, {"error": says})] * 3
    assert grpc_calls == [(grpc.StatusCode.PERMISSION_DENIED, says)] * 3
    assert still["model_version"] == "100000"  # (nothing unloaded)


def test_repository_index_load_unload_and_rollback_over_rest_and_grpc(two_run):
    """The index lists each loaded version; a load naming a version pins it (the rollback) and every request after
    it gets it; a load without one follows the newest again; an unload takes the model away (UNAVAILABLE, its
    lines refused) until it is loaded again; the same through gRPC."""
    old, new = I.load(two_run / "Vector" / "Vector-50000.pt"), I.load(two_run / "Vector" / "Vector-100000.pt")
    obs = vector_obs(2, 4)
    repo = Repository([two_run])
    repo.poll()
    options = ServeOptions(allow_model_control=True)
    with serving(None, options, repo, listen="127.0.0.1:0", http="127.0.0.1:0", grpc="127.0.0.1:0") as said:
        where = said["http"]
        first = rest(where, "POST", "/v2/repository/index")
        pinned = rest(where, "POST", "/v2/repository/models/Vector/load", {"parameters": {"version": "50000"}})
        _, rolled_back = rest_infer(where, "Vector", obs)
        ready_rows = rest(where, "POST", "/v2/repository/index", {"ready": True})[1]
        following = rest(where, "POST", "/v2/repository/models/Vector/load")
        _, newest = rest_infer(where, "Vector", obs)
        unloaded = rest(where, "POST", "/v2/repository/models/Hybrid/unload")
        with dial(said["listen"]) as sock:
            refused = exchange(sock, [{"id": 1, "model": "Hybrid", "obs": hybrid_obs(1, 0)[0].tolist()}])[0]
        after_unload = rest(where, "POST", "/v2/repository/index")[1]
        with grpc.insecure_channel(said["grpc"], options=GRPC_OPTIONS) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="Hybrid"), timeout=120)
            request = pb.RepositoryModelLoadRequest(model_name="Vector")
            request.parameters["version"].string_param = "50000"
            stub.RepositoryModelLoad(request, timeout=120)
            by_grpc = grpc_infer(stub, "Vector", obs)
            index = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), timeout=60)
            unload = pb.RepositoryModelUnloadRequest(model_name="Vector")
            unload.parameters["version"].int64_param = 50000  # (the serving version: back to the newest other)
            stub.RepositoryModelUnload(unload, timeout=60)
            back = grpc_infer(stub, "Vector", obs)
    assert first == (
        200,
        [
            {"name": "Hybrid", "version": "40000", "state": "READY", "reason": "serving"},
            {"name": "Vector", "version": "100000", "state": "READY", "reason": "serving"},
        ],
    )
    assert pinned[0] == following[0] == unloaded[0] == 200
    assert rolled_back["model_version"] == "50000"
    assert (
        np.abs(rest_output(rolled_back, "deterministic_continuous_actions") - old.act(obs)["continuous_actions"]).max()
        <= TOL
    )
    assert {(r["name"], r["version"], r["reason"]) for r in ready_rows} == {
        ("Hybrid", "40000", "serving"),
        ("Vector", "50000", "serving, pinned"),
        ("Vector", "100000", "loaded"),
    }
    assert newest["model_version"] == "100000"
    assert (
        np.abs(rest_output(newest, "deterministic_continuous_actions") - new.act(obs)["continuous_actions"]).max()
        <= TOL
    )
    assert refused == {"id": 1, "error": "model Hybrid: not served (served: Vector)"}
    assert {"name": "Hybrid", "version": "", "state": "UNAVAILABLE", "reason": "unloaded"} in after_unload
    assert by_grpc.model_version == "50000"
    assert (
        np.abs(grpc_output(by_grpc, "deterministic_continuous_actions") - old.act(obs)["continuous_actions"]).max()
        <= TOL
    )
    assert {(m.name, m.version) for m in index.models} >= {("Hybrid", "40000"), ("Vector", "50000")}
    assert back.model_version == "100000"


def test_hostile_repository_calls_get_one_line_each(two_run, tmp_path):
    """Paths outside the served folders, '..', a link that leaves them, unknown models and versions, bad bodies: one
    line each, and the server answers on (a flood of loads: the next test)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    link = two_run / "elsewhere"
    link.symlink_to(outside, target_is_directory=True)
    repo = Repository([two_run])
    repo.poll()
    try:
        with serving(None, ServeOptions(allow_model_control=True), repo, http="127.0.0.1:0") as said:
            where = said["http"]
            cases = {
                "dotdot": rest(where, "POST", "/v2/repository/models/..%2F..%2Fetc/load"),
                "absolute": rest(where, "POST", "/v2/repository/models/%2Fetc/load"),
                "link": rest(where, "POST", "/v2/repository/models/elsewhere%2F/load"),
                "unknown": rest(where, "POST", "/v2/repository/models/Keeper/load"),
                "version": rest(where, "POST", "/v2/repository/models/Vector/load", {"parameters": {"version": "7"}}),
                "bad version": rest(
                    where, "POST", "/v2/repository/models/Vector/load", {"parameters": {"version": "x"}}
                ),
                "bad body": rest(where, "POST", "/v2/repository/models/Vector/load", [1, 2]),
                "unload unknown": rest(where, "POST", "/v2/repository/models/Keeper/unload"),
            }
            _, after = rest_infer(where, "Vector", vector_obs(1, 0))
    finally:
        link.unlink()
    for name, (status, body) in cases.items():
        assert status in (400, 404) and set(body) == {"error"} and "\n" not in body["error"], (name, body)
    assert "'..' is refused" in cases["dotdot"][1]["error"]
    assert "leads outside the served folders" in cases["absolute"][1]["error"]
    assert "leads outside the served folders" in cases["link"][1]["error"]
    assert cases["unknown"][0] == 404 and cases["version"][0] == 404
    assert after["model_version"] == "100000"


def test_a_flood_of_load_requests_past_the_bound_is_refused_at_once_in_one_line_each(two_run, monkeypatch):
    """One load held in its verification (the real verify, waiting on an Event: no timing luck); 40 more loads sent
    meanwhile: CONTROL_CALLS (4) run in all (those past the held one wait for it), every other one is refused at
    once, 503 with one line, holding no thread; inference answers throughout; once released, the loads let in end
    200 and the model answers."""
    import threading

    from mlagents_inference.services import repository as repository_module
    from mlagents_inference.services.serve_common import CONTROL_CALLS

    real_verify = repository_module.verify
    entered, release = threading.Event(), threading.Event()

    def verify_held(found, *args, **kwargs):
        entered.set()
        assert release.wait(120), "never released"
        return real_verify(found, *args, **kwargs)

    repo = Repository([two_run])
    repo.poll()
    monkeypatch.setattr(repository_module, "verify", verify_held)
    with serving(None, ServeOptions(allow_model_control=True), repo, http="127.0.0.1:0") as said:
        where = said["http"]
        assert rest(where, "POST", "/v2/repository/models/Hybrid/unload")[0] == 200
        answers: list = []

        def load(model: str) -> None:
            answers.append(rest(where, "POST", f"/v2/repository/models/{model}/load"))

        threads = [threading.Thread(target=load, args=("Hybrid",))]
        threads[0].start()
        try:
            assert entered.wait(120), "the load never reached verification"
            threads += [threading.Thread(target=load, args=(("Vector", "Hybrid")[n % 2],)) for n in range(40)]
            for thread in threads[1:]:
                thread.start()
            for _ in range(1200):  # (bounded: about two minutes; refused at once, they come in well before)
                if len(answers) >= 41 - CONTROL_CALLS:
                    break
                time.sleep(0.1)
            refusals = list(answers)
            status, during = rest_infer(where, "Vector", vector_obs(1, 0))
        finally:
            release.set()
            for thread in threads:
                thread.join(120)
        _, hybrid = rest_infer(where, "Hybrid", hybrid_obs(1, 0))
    says = f"{CONTROL_CALLS} repository calls are running already (at most {CONTROL_CALLS}); try again"
    assert refusals == [(503, {"error": says})] * (41 - CONTROL_CALLS)
    assert (status, during["model_version"]) == (200, "100000")  # (the passes go on during the flood)
    assert len(answers) == 41 and [a for a in answers if a[0] != 503] == [(200, None)] * CONTROL_CALLS
    assert hybrid["model_version"] == "40000"


def test_repository_index_calls_count_against_the_same_bound_as_loads(two_run, monkeypatch):
    """CONTROL_CALLS index calls held in their look at the served folders (the real discover, waiting on an Event);
    10 more index calls and a load sent meanwhile are each refused at once, 503 with one line, rather than queued
    without bound; once released, the held ones answer the index."""
    import threading

    from mlagents_inference.loaders import run_folder
    from mlagents_inference.services.serve_common import CONTROL_CALLS

    real_discover, release = run_folder.discover, threading.Event()
    entered = threading.Semaphore(0)

    def discover_held(*args, **kwargs):
        entered.release()
        assert release.wait(120), "never released"
        return real_discover(*args, **kwargs)

    repo = Repository([two_run])
    repo.poll()
    monkeypatch.setattr(run_folder, "discover", discover_held)  # (serve's index looks it up there as it runs)
    with serving(None, ServeOptions(allow_model_control=True), repo, http="127.0.0.1:0") as said:
        where = said["http"]
        held: list = []
        late: list = []
        threads = [
            threading.Thread(target=lambda: held.append(rest(where, "POST", "/v2/repository/index")))
            for _ in range(CONTROL_CALLS)
        ]
        try:
            for thread in threads:
                thread.start()
            for _ in range(CONTROL_CALLS):
                assert entered.acquire(timeout=120), "an index call never reached the folders"
            refused: list = []
            late += [
                threading.Thread(target=lambda path=path: refused.append(rest(where, "POST", path)))
                for path in ["/v2/repository/index"] * 10 + ["/v2/repository/models/Vector/load"]
            ]
            for thread in late:
                thread.start()
            for thread in late:
                thread.join(30)  # (refused at once, they end well within it; queued, they would not)
            answered_late = list(refused)
        finally:
            release.set()
            for thread in threads + late:
                thread.join(120)
    says = f"{CONTROL_CALLS} repository calls are running already (at most {CONTROL_CALLS}); try again"
    assert answered_late == [(503, {"error": says})] * 11
    assert [status for status, _ in held] == [200] * CONTROL_CALLS
    assert {(r["name"], r["state"]) for r in held[0][1]} == {("Hybrid", "READY"), ("Vector", "READY")}


def test_the_command_line_serves_each_model_dir_given_and_refuses_what_does_not_fit(tmp_path, capsys):
    """`--mode serve --model-dir A --model-dir B` (two run folders) serves both behaviours, each answer naming its
    model and its newest checkpoint's step; another mode given two folders, and --follow without one, are refused
    in one line."""
    import shutil
    import signal

    one = copy_run(EXAMPLES / "vector", tmp_path, "one")
    two = copy_run(EXAMPLES / "hybrid", tmp_path, "two")
    proc, where, _ = serve_process("--model-dir", one, "--model-dir", two, "--listen", "127.0.0.1:0")
    try:
        with dial(where) as sock:
            got = exchange(
                sock,
                [
                    {"id": 1, "model": "Vector", "obs": vector_obs(1, 0)[0].tolist()},
                    {"id": 2, "model": "Hybrid", "obs": hybrid_obs(1, 0)[0].tolist()},
                    {"id": 3, "obs": vector_obs(1, 0)[0].tolist()},
                ],
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert [(a.get("model"), a.get("version")) for a in got] == [
        ("Vector", "100000"),
        ("Hybrid", "40000"),
        (None, None),
    ]
    assert "error" not in got[0] and "error" not in got[1] and got[2]["error"].startswith("name the model")
    refused(run(capsys, "--mode", "info", "--model-dir", one, "--model-dir", two), "only --mode serve")
    refused(run(capsys, "--mode", "serve", "--follow", "--listen", "127.0.0.1:0"), "give --model-dir")
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copytree(one / "run_logs", empty / "run_logs")
    refused(
        run(capsys, "--mode", "serve", "--model-dir", empty, "--follow", "--listen", "127.0.0.1:0"), "no checkpoint"
    )


def stderr_until(proc, text: str, done, seconds: float = 120) -> str:
    """A serve process's stderr read as it comes (select, bounded in time), from `text` (what serve_process read),
    until done(what was read) holds; an assertion error, the text so far in it, past `seconds`."""
    deadline = time.monotonic() + seconds
    while not done(text):
        left = deadline - time.monotonic()
        assert left > 0 and proc.poll() is None, (proc.poll(), text[-3000:])
        if select.select([proc.stderr], [], [], min(left, 1.0))[0]:
            text += os.read(proc.stderr.fileno(), 65536).decode(errors="replace")
    return text


def stopped(proc, text: str) -> str:
    """SIGTERM, exit 0, and the whole of the process's stderr."""
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read().decode(errors="replace")
    assert proc.wait(timeout=60) == 0, (text + rest)[-3000:]
    proc.stderr.close()
    return text + rest


def test_pin_on_the_command_line_holds_its_version_and_a_pin_no_verified_checkpoint_has_is_refused(tmp_path):
    """`serve --follow --pin Vector:50000`: a newer checkpoint is loaded beside the pin, lines naming no version get
    50000 and a line may name the new one. A pin of a step with no finished checkpoint (a typo), or of one that
    fails verification, ends serve at start: exit 2, one line naming the pin and why (not the newest served in its
    place without a word); `--ray` alike."""
    run = copy_run(EXAMPLES / "vector", tmp_path, "run")
    source = EXAMPLES / "vector" / "Vector" / "Vector-100000.pt"
    (run / "Vector" / "Vector-200000.pt").write_bytes(source.read_bytes()[:5000])  # (truncated, listed)
    list_checkpoint(run, "Vector", 200000)
    obs = vector_obs(1, 6)[0].tolist()
    old = I.load(run / "Vector" / "Vector-50000.pt").act(np.asarray(obs)[None])["continuous_actions"][0]
    for pin, says in (
        ("Vector:70000", "--pin Vector:70000: no finished checkpoint of step 70000 (finished: 50000, 100000, 200000)"),
        ("Vector:200000", "--pin Vector:200000: version 200000 did not pass verification (refused, nothing in it"),
    ):
        try:
            result = cli("--mode", "serve", "--model-dir", run, "--pin", pin, "--listen", "127.0.0.1:0", timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve --pin {pin} started serving instead of refusing the pin")
        assert refused(result, says).startswith("error: " + says)
        ray = cli("--mode", "serve", "--ray", "local", "--http", "127.0.0.1:0", "--model-dir", run, "--pin", pin)
        assert refused(ray, says).startswith("error: " + says)  # (--ray: before Ray is started, or even imported)
    proc, where, text = serve_process(
        "--model-dir", run, "--pin", "Vector:50000", "--follow", "--follow-poll-s", "0.1", "--listen", "127.0.0.1:0"
    )
    try:
        write_checkpoint(run, "Vector", 150000, source, scale=1.5)
        with dial(where) as sock:
            for _ in range(1200):  # (bounded: about two minutes)
                named = exchange(sock, [{"id": 0, "model": "Vector", "version": 150000, "obs": obs}])[0]
                if "error" not in named:
                    break
                time.sleep(0.1)
            got = exchange(sock, [{"id": 1, "obs": obs}, {"id": 2, "model": "Vector", "obs": obs}])
    finally:
        text = stopped(proc, text)
    new = I.load(run / "Vector" / "Vector-150000.pt").act(np.asarray(obs)[None])["continuous_actions"][0]
    assert named["version"] == "150000" and np.abs(np.asarray(named["continuous_actions"]) - new).max() <= TOL
    for answer in got:
        assert (answer["model"], answer["version"]) == ("Vector", "50000"), answer
        assert np.abs(np.asarray(answer["continuous_actions"]) - old).max() <= TOL
    assert np.abs(new - old).max() > 1e-3  # (the pin shows: the two answer apart)
    assert text.count("Vector-200000.pt: not served") == 1, text


def test_serve_follow_says_each_checkpoint_it_refuses_in_one_stderr_line_and_the_old_version_answers(tmp_path):
    """`inference.py --mode serve --follow` as a user runs it: a truncated .pt, a .pt with a corrupt .onnx and one
    that fails onnx-compare, each written and listed as mlagents-learn does: one stderr line each (naming the file
    and why, said once however many scans pass), and version 100000 answers throughout."""
    run = copy_run(EXAMPLES / "vector", tmp_path, "run")
    source = EXAMPLES / "vector" / "Vector" / "Vector-100000.pt"
    obs = vector_obs(1, 7)[0].tolist()
    proc, where, text = serve_process(
        "--model-dir", run, "--follow", "--follow-poll-s", "0.1", "--listen", "127.0.0.1:0"
    )
    try:
        (run / "Vector" / "Vector-200000.pt").write_bytes(source.read_bytes()[:5000])
        list_checkpoint(run, "Vector", 200000)
        write_checkpoint(run, "Vector", 250000, source, scale=1.2, listed=False)
        (run / "Vector" / "Vector-250000.onnx").write_bytes(b"not an onnx file")
        list_checkpoint(run, "Vector", 250000)
        write_checkpoint(run, "Vector", 300000, source, scale=2.0, onnx=run / "Vector" / "Vector-50000.onnx")
        text = stderr_until(proc, text, lambda said: said.count("[repository]") >= 3)
        time.sleep(1.0)  # (ten more scans: none may say a file again)
        with dial(where) as sock:
            after = exchange(sock, [{"id": 1, "obs": obs}])[0]
    finally:
        text = stopped(proc, text)
    said = [line for line in text.splitlines() if line.startswith("[repository]")]
    assert len(said) == 3, text
    for step, why in (
        (200000, "not a PyTorch checkpoint file, or a damaged/truncated one"),
        (250000, "Vector-250000.onnx: not an ONNX file"),
        (300000, "differs from Vector-300000.onnx"),
    ):
        (line,) = [x for x in said if f"Vector-{step}.pt: not served (" in x]
        assert why in line and line.endswith("; version 100000 keeps answering"), line
    assert (after["version"], "error" in after) == ("100000", False)
    want = I.load(run / "Vector" / "Vector-100000.pt").act(np.asarray(obs)[None])["continuous_actions"][0]
    assert np.abs(np.asarray(after["continuous_actions"]) - want).max() <= TOL


def test_v2_ready_is_false_while_the_repository_api_loads_a_model_and_true_once_loaded(two_run, monkeypatch):
    """A load through the repository API is held in its verification (the real verify, entered and waiting on an
    Event: no timing luck): meanwhile GET /v2/models/{m}/ready answers 503 and gRPC ModelReady false, for a model
    loaded again after an unload and for a served model whose rollback loads an older version; the other model
    stays ready; once the load is answered, ready is true and the loaded version answers."""
    import threading

    from mlagents_inference.services import repository as repository_module

    real_verify, held = repository_module.verify, {}
    entered, release = threading.Event(), threading.Event()

    def verify_held(found, *args, **kwargs):
        if found.behavior in held:
            entered.set()
            assert release.wait(120), "never released"
        return real_verify(found, *args, **kwargs)

    monkeypatch.setattr(repository_module, "verify", verify_held)
    repo = Repository([two_run])
    repo.poll()
    options = ServeOptions(allow_model_control=True)
    with serving(None, options, repo, http="127.0.0.1:0", grpc="127.0.0.1:0") as said:
        where = said["http"]
        channel = grpc.insecure_channel(said["grpc"], options=GRPC_OPTIONS)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        def ready(model: str, version: str = "") -> tuple:
            path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/ready"
            answer = stub.ModelReady(pb.ModelReadyRequest(name=model, version=version), timeout=60).ready
            return rest(where, "GET", path)[0], answer

        def held_load(model: str, body=None) -> tuple:
            """(ready during the load: model, the other model; the load's answer; ready after it)."""
            entered.clear()
            release.clear()
            held.clear()
            held[model] = True
            answers: list = []
            thread = threading.Thread(
                target=lambda: answers.append(rest(where, "POST", f"/v2/repository/models/{model}/load", body))
            )
            thread.start()
            try:
                assert entered.wait(120), "the load never reached verification"
                other = "Hybrid" if model == "Vector" else "Vector"
                during = ready(model), ready(other)
                index = rest(where, "POST", "/v2/repository/index")[1]
            finally:
                release.set()
                thread.join(120)
                held.clear()
            return during, index, answers, ready(model)

        unloaded = rest(where, "POST", "/v2/repository/models/Hybrid/unload")
        reload_during, reload_index, reload_answer, reload_after = held_load("Hybrid")
        rollback_during, _, rollback_answer, rollback_after = held_load("Vector", {"parameters": {"version": "50000"}})
        _, rolled_back = rest_infer(where, "Vector", vector_obs(1, 0))
        channel.close()
    assert unloaded[0] == 200
    (loading, loading_grpc), other = reload_during
    assert loading == 503 and loading_grpc is False  # (the unloaded model, loading again: not "unknown", 404)
    assert other == (200, True)  # (Vector answers on meanwhile)
    assert {"name": "Hybrid", "version": "", "state": "LOADING", "reason": "a load is running"} in reload_index
    assert reload_answer == [(200, None)] and reload_after == (200, True)
    (loading, loading_grpc), other = rollback_during
    assert loading == 503 and loading_grpc is False  # (served, its rollback loading an older version)
    assert other == (200, True)
    assert rollback_answer == [(200, None)] and rollback_after == (200, True)
    assert rolled_back["model_version"] == "50000"
