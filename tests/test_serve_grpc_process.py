"""serve --grpc-process on (the default): grpcio's server runs in a process of its own that hands each call to serve
over a socket pair (fronts.serve_grpc: Relay and Lane). What a client sees is what serve's own grpcio server answers
(--grpc-process off): the same response bytes, statuses and texts, method by method, on every kind of example policy
(an LSTM's sequences kept too); and the second process never outlives serve nor hides its end: serve killed takes it
along, serve's signals end both with serve's exit codes, and that process gone ends serve in one line with exit 2."""

import contextlib
import os
import signal
import time

import numpy as np
import pytest
from conftest import EXAMPLES, child_pids, serve_process

import inference as I

grpc = pytest.importorskip("grpc")
pb = pytest.importorskip("tritonclient.grpc.service_pb2")

from mlagents_inference.fronts.serve import serving  # noqa: E402
from mlagents_inference.services.batcher import ServeOptions  # noqa: E402

OWN = [("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)]
SERVICE = "/inference.GRPCInferenceService/"


def alive(pid: int) -> bool:
    """Whether a pid is a process that has not ended (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def unary(channel, method: str, body: bytes, metadata=None) -> tuple:
    """A unary call's (status name, details, response bytes), as bytes go on the wire."""
    call = channel.unary_unary(SERVICE + method)
    try:
        return "OK", "", call(body, timeout=60, metadata=metadata)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details(), b""


def stream(channel, bodies: list) -> tuple:
    """ModelStreamInfer with these messages: (its answers' bytes, how it ended: status name and details)."""
    answers = []
    try:
        for answer in channel.stream_stream(SERVICE + "ModelStreamInfer")(iter(bodies), timeout=60):
            answers.append(answer)
        return answers, ("OK", "")
    except grpc.RpcError as exc:
        return answers, (exc.code().name, exc.details())


def infer_request(name: str, obs: np.ndarray, ident: str = "", **parameters) -> bytes:
    request = pb.ModelInferRequest(model_name=name, id=ident)
    request.inputs.add(name="obs_0", datatype="FP32", shape=list(obs.shape))
    request.raw_input_contents.append(obs.astype("<f4").tobytes())
    for key, value in parameters.items():
        if isinstance(value, bool):
            request.parameters[key].bool_param = value
        else:
            request.parameters[key].int64_param = value
    return request.SerializeToString()


def typed_request(name: str, obs: np.ndarray) -> bytes:
    request = pb.ModelInferRequest(model_name=name)
    request.parameters["seed"].int64_param = 3
    tensor = request.inputs.add(name="obs_0", datatype="FP32", shape=list(obs.shape))
    tensor.contents.fp32_contents.extend(obs.ravel().tolist())
    return request.SerializeToString()


def what_a_client_sees(address: str, name: str, width: int, sequences: bool) -> list:
    """Every kind of call a client makes, each with what came back."""
    obs = np.linspace(-1, 1, 3 * width, dtype=np.float32).reshape(3, width)
    seen = []
    with grpc.insecure_channel(address, options=OWN) as channel:
        for method, body in [
            ("ServerLive", b""),
            ("ServerReady", b""),
            ("ServerMetadata", b""),
            ("ModelReady", pb.ModelReadyRequest(name=name).SerializeToString()),
            ("ModelMetadata", pb.ModelMetadataRequest(name=name).SerializeToString()),
            ("ModelConfig", pb.ModelConfigRequest(name=name).SerializeToString()),
            ("ModelMetadata", pb.ModelMetadataRequest(name="Nope").SerializeToString()),
            ("ModelMetadata", pb.ModelMetadataRequest(name=name, version="7").SerializeToString()),
            ("RepositoryIndex", b""),
            ("SystemSharedMemoryStatus", b""),
            ("NoSuchMethod", b""),
            ("ModelInfer", infer_request(name, obs, "a", seed=7)),
            ("ModelInfer", typed_request(name, obs)),
            ("ModelInfer", infer_request(name, obs[:, :-1])),
            ("ModelInfer", infer_request("Nope", obs)),
            ("ModelInfer", b"\xff\xff\xff"),
        ]:
            seen.append((method, unary(channel, method, body)))
        if sequences:  # (an LSTM's memory kept between the steps of one sequence, by the client's host)
            for step in range(3):
                body = infer_request(name, obs[:1], f"q{step}", seed=step, sequence_id=41, sequence_start=step == 0)
                seen.append(("sequence", unary(channel, "ModelInfer", body)))
            seen.append(
                ("unknown sequence", unary(channel, "ModelInfer", infer_request(name, obs[:1], seed=1, sequence_id=9)))
            )
        bodies = [infer_request(name, obs, f"s{i}", seed=i) for i in range(4)] + [infer_request("Nope", obs)]
        seen.append(("stream", stream(channel, bodies)))
        seen.append(("stream cut", stream(channel, bodies[:2] + [b"\xff\xff\xff"] + bodies[2:])))
    return seen


@pytest.mark.parametrize("kind", ["vector", "lstm"])
def test_a_client_sees_the_same_bytes_and_statuses_through_grpcs_own_process(kind):
    policy = I.load(EXAMPLES / kind)
    name, width = str(policy.info["behavior"]), policy.info["inputs"][0]["shape"][0]
    seen = {}
    for way in (False, True):
        with serving(policy, ServeOptions(grpc_process=way), grpc="127.0.0.1:0") as said:
            seen[way] = what_a_client_sees(said["grpc"], name, width, sequences=kind == "lstm")
    assert len(seen[True]) == len(seen[False])
    for (method, theirs), (_, ours) in zip(seen[False], seen[True]):
        assert ours == theirs, (method, theirs, ours)
    calls = [(method, got) for method, got in seen[True] if not method.startswith("stream")]
    statuses = [status for _, (status, _, _) in calls]
    assert {"OK", "NOT_FOUND", "INVALID_ARGUMENT", "UNIMPLEMENTED", "UNKNOWN"} <= set(statuses), statuses
    steps = [got for method, got in calls if method == "sequence"]
    assert all(status == "OK" for status, _, _ in steps) and len(steps) == (3 if kind == "lstm" else 0), steps
    infers = [answer for method, (status, _, answer) in calls if method == "ModelInfer" and status == "OK"]
    assert len(infers) == 2 and all(b"deterministic" in answer for answer in infers), infers  # (both forms answered)
    (answers, ended), (_, cut) = seen[True][-2][1], seen[True][-1][1]
    assert len(answers) == 5 and answers[-1].startswith(b"\x0a") and ended == ("OK", ""), (answers, ended)
    assert cut[0] == "INVALID_ARGUMENT" and "could not be read" in cut[1], cut


def start(*more):
    proc, address, said = serve_process("--model-dir", EXAMPLES / "vector", "--grpc", "127.0.0.1:0", *more, says="grpc")
    deadline = time.monotonic() + 10
    while not child_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, address, said, child_pids(proc.pid)


@contextlib.contextmanager
def killed_if_left(proc):
    """A server process, killed and waited for on the way out where it has not ended (a failed assertion, say)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def gone_within(pids: list, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def test_serve_killed_takes_its_grpc_process_along():
    proc, _, _, relay = start()
    try:
        assert len(relay) == 1, relay
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert gone_within(relay, 10), relay


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)], ids=["sigterm", "sigint"])
def test_serves_signals_end_both_processes_with_serves_exit_code(signum, code):
    proc, address, said, relay = start()
    with killed_if_left(proc):
        with grpc.insecure_channel(address, options=OWN) as channel:
            assert unary(channel, "ServerLive", b"")[0] == "OK"
        for pid in [proc.pid, *relay]:  # (the relay too, should a signal reach it: it leaves the stop to serve)
            os.kill(pid, signum)
        _, err = proc.communicate(timeout=30)
    text = err.decode(errors="replace")
    assert proc.returncode == code, text[-2000:]
    assert "Traceback" not in text, text[-2000:]
    assert gone_within(relay, 10), relay


def test_grpcs_process_gone_ends_serve_in_one_line_with_exit_2():
    proc, _, said, relay = start("--grpc-process", "on")
    with killed_if_left(proc):
        assert len(relay) == 1, relay
        os.kill(relay[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    text = err.decode(errors="replace")
    lines = [line for line in text.splitlines() if line.strip() and line not in said]
    assert proc.returncode == 2, text[-2000:]
    assert len(lines) == 1 and "--grpc-process on" in lines[0] and "ended" in lines[0], lines


def test_grpc_process_off_serves_in_serves_own_process():
    proc, address, _, relay = start("--grpc-process", "off")
    try:
        assert relay == [], relay
        with grpc.insecure_channel(address, options=OWN) as channel:
            assert unary(channel, "ServerLive", b"")[0] == "OK"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


@pytest.mark.parametrize("way", [False, True], ids=["grpc-in-serve", "grpc-process"])
def test_a_call_whose_client_gave_up_while_it_waited_is_cancelled_in_serve_not_counted(way):
    """A call past its deadline while it waits for its engine call (here --max-wait-us holds it 2 s) is cancelled by
    grpcio; in serve's own loop its coroutine is cancelled with it, and through the relay a frame tells serve to
    cancel it too: neither answers nor counts it (the relay once left serve to compute and count every such call)."""
    policy = I.load(EXAMPLES / "vector")
    name = str(policy.info["behavior"])
    obs = np.zeros((1, 8), np.float32)
    with serving(policy, ServeOptions(max_wait_us=2_000_000, grpc_process=way), grpc="127.0.0.1:0") as said:
        with grpc.insecure_channel(said["grpc"], options=OWN) as channel:
            call = channel.unary_unary(SERVICE + "ModelInfer")
            with pytest.raises(grpc.RpcError) as late:
                call(infer_request(name, obs), timeout=0.3)
            assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            time.sleep(2.5)  # (its wait over)
            assert unary(channel, "ModelInfer", infer_request(name, obs))[0] == "OK"
            status, _, body = unary(
                channel, "ModelStatistics", pb.ModelStatisticsRequest(name=name).SerializeToString()
            )
    assert status == "OK"
    (stats,) = pb.ModelStatisticsResponse.FromString(body).model_stats
    assert stats.inference_stats.success.count == 1, stats.inference_stats


@pytest.mark.parametrize("way", ["on", "off"])
def test_a_module_in_the_working_folder_shadows_nothing_and_the_largest_message_bound_serves(tmp_path, way):
    """serve's process never looks in its working folder for modules (inference.py's folder comes first), and neither
    does the relay (its `python -c` would put the working folder first: a json.py there once broke its start, with a
    traceback and a line blaming the port); --max-line-bytes at its largest is told to grpcio as the largest message
    it can be told (a C int: it once ended serve with an OverflowError's traceback)."""
    (tmp_path / "json.py").write_text("raise RuntimeError('the working folder was searched')\n")
    proc, address, said = serve_process(
        "--model-dir", EXAMPLES / "vector", "--grpc", "127.0.0.1:0", "--grpc-process", way,
        "--max-line-bytes", 2147483647, says="grpc", cwd=tmp_path,
    )  # fmt: skip
    try:
        with grpc.insecure_channel(address, options=OWN) as channel:
            assert unary(channel, "ServerLive", b"")[0] == "OK"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    text = said + err.decode(errors="replace")
    assert proc.returncode == 0 and "Traceback" not in text, text[-2000:]


def test_a_terminals_ctrl_c_while_grpcs_process_starts_is_serves_alone():
    """Ctrl-C reaches a terminal's whole process group: the relay, started in a session of its own, never gets it (it
    once printed a KeyboardInterrupt traceback when it came during its start); serve stops it and exits 130."""
    import subprocess
    import sys

    from conftest import ROOT, child_env

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "inference.py"), "--mode", "serve", "--model-dir", EXAMPLES / "vector"]
        + ["--grpc", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(),
        start_new_session=True,  # (its own group: the test's signal reaches serve and whatever shares its group)
    )
    with killed_if_left(proc):
        deadline = time.monotonic() + 60
        while not child_pids(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        relay = child_pids(proc.pid)
        assert relay, "no gRPC process started"
        time.sleep(0.1)  # (the relay importing its modules)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    text = err.decode(errors="replace")
    assert proc.returncode in (130, 2), text[-2000:]  # (130 once serving; 2 where the signal came before: one line)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-2000:]
    assert gone_within(relay, 10), relay
