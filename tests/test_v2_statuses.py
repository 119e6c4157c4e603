"""Every V2 refusal carries its status, on REST and on gRPC alike (services.errors, mapped once per transport by
services.dataplane): an unknown model 404 / NOT_FOUND, a request that does not fit the model 400 / INVALID_ARGUMENT,
the engine's own failure 500 / INTERNAL, a request while the server stops 503 / UNAVAILABLE. The engine failure is
provoked on a real engine (the example's onnxruntime session, wrapped to raise on one observation value); the server
runs in this process (fronts.serve.serving, on a thread), driven with http.client and Triton's generated gRPC stubs."""

import contextlib
import http.client
import json
import socket
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import EXAMPLES

import inference as I

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")
grpc = pytest.importorskip("grpc")
pb = pytest.importorskip("tritonclient.grpc.service_pb2")
service_pb2_grpc = pytest.importorskip("tritonclient.grpc.service_pb2_grpc")

from mlagents_inference.fronts.serve import serving  # noqa: E402
from mlagents_inference.services.batcher import ServeOptions  # noqa: E402

POISON = 1234.5  # the observation value on which the wrapped engine raises


def failing_policy():
    """The vector example whose engine raises (as onnxruntime does on a failure of its own) when an observation holds
    POISON, and answers every other observation as before."""
    policy = I.load(EXAMPLES / "vector")
    run = policy.engine.run

    def run_or_fail(flat, names=None):
        if np.any(np.asarray(flat[0]) == POISON):
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : provoked by the test")
        return run(flat, names)

    policy.engine.run = run_or_fail
    return policy


GRPC_WAYS = {
    "grpc-in-serve": ServeOptions(grpc_process=False),
    "grpc-process": ServeOptions(grpc_process=True),
}  # (--grpc-process)


@pytest.fixture(scope="module", params=list(GRPC_WAYS))
def server(request):
    policy = failing_policy()
    with serving(policy, GRPC_WAYS[request.param], http="127.0.0.1:0", grpc="127.0.0.1:0") as said:
        yield SimpleNamespace(name=str(policy.info["behavior"]), **said)


def rest_infer(where: str, model: str, obs: np.ndarray) -> tuple:
    """(status, the answer's JSON) of POST /v2/models/{model}/infer with obs_0 as JSON data."""
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = {"inputs": [{"name": "obs_0", "datatype": "FP32", "shape": list(obs.shape), "data": obs.ravel().tolist()}]}
    try:
        conn.request("POST", f"/v2/models/{model}/infer", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def grpc_infer(where: str, model: str, obs: np.ndarray):
    """ModelInfer's response, or its grpc.RpcError."""
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="obs_0", datatype="FP32", shape=list(obs.shape))
    request.raw_input_contents.append(obs.astype("<f4").tobytes())
    with grpc.insecure_channel(where, options=[("grpc.enable_http_proxy", 0)]) as channel:
        try:
            return service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
        except grpc.RpcError as exc:
            return exc


def good_obs(rows: int = 2) -> np.ndarray:
    return np.linspace(-1, 1, rows * 8, dtype=np.float32).reshape(rows, 8)


def poisoned_obs() -> np.ndarray:
    obs = good_obs()
    obs[1, 3] = POISON
    return obs


def test_rest_statuses(server):
    cases = [
        ("unknown model", "Nope", good_obs(), 404, "unknown model 'Nope'"),
        ("bad request", server.name, good_obs()[:, :5], 400, "shape [2, 5]"),
        ("engine failure", server.name, poisoned_obs(), 500, "engine failed"),
    ]
    for what, model, obs, status, words in cases:
        got, answer = rest_infer(server.http, model, obs)
        assert (got, set(answer)) == (status, {"error"}) and words in answer["error"], (what, got, answer)
        assert "\n" not in answer["error"]
    got, answer = rest_infer(server.http, server.name, good_obs())
    assert got == 200 and answer["outputs"], answer  # (the server goes on)


def test_grpc_statuses(server):
    codes = grpc.StatusCode
    cases = [
        ("unknown model", "Nope", good_obs(), codes.NOT_FOUND, "unknown model 'Nope'"),
        ("bad request", server.name, good_obs()[:, :5], codes.INVALID_ARGUMENT, "shape [2, 5]"),
        ("engine failure", server.name, poisoned_obs(), codes.INTERNAL, "engine failed"),
    ]
    for what, model, obs, code, words in cases:
        got = grpc_infer(server.grpc, model, obs)
        assert isinstance(got, grpc.RpcError), (what, got)
        assert got.code() == code and words in got.details() and "\n" not in got.details(), (what, got)
    got = grpc_infer(server.grpc, server.name, good_obs())
    assert not isinstance(got, grpc.RpcError) and got.outputs, got


@pytest.mark.parametrize("way", list(GRPC_WAYS))
def test_while_stopping_inference_is_unavailable_on_both(way):
    """SIGTERM's grace: the server answers what it holds (here a --listen client that sends many lines and reads
    none, so that it stays) and refuses new inference: 503 on REST, UNAVAILABLE on gRPC."""
    policy = I.load(EXAMPLES / "vector")
    said, leave, failure = {}, threading.Event(), []
    up = threading.Event()

    def run():
        try:
            with serving(policy, GRPC_WAYS[way], listen="127.0.0.1:0", http="127.0.0.1:0", grpc="127.0.0.1:0") as got:
                said.update(got)
                up.set()
                leave.wait(60)
        except BaseException as exc:  # noqa: BLE001 - said in the test's thread
            failure.append(exc)
        finally:
            up.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert up.wait(120) and not failure, failure
    host, port = said["listen"].rsplit(":", 1)
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (its answers pile up at the server, unsent)
    holder.connect((host, int(port)))
    name = str(policy.info["behavior"])
    try:
        holder.sendall(b'{"info": true}\n' * 8000)
        time.sleep(0.5)
        leave.set()  # (the block ends: the server stops as on SIGTERM, and waits for the holder's answers)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and ready_status(said["http"]) != 503:
            time.sleep(0.02)
        assert ready_status(said["http"]) == 503, "the server never said it was stopping"
        status, answer = rest_infer(said["http"], name, good_obs())
        assert (status, answer) == (503, {"error": "the server is stopping"})
        got = grpc_infer(said["grpc"], name, good_obs())
        assert isinstance(got, grpc.RpcError) and got.code() == grpc.StatusCode.UNAVAILABLE, got
        assert got.details() == "the server is stopping"
    finally:
        leave.set()
        with contextlib.suppress(OSError):
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        holder.close()
        thread.join(30)
    assert not thread.is_alive() and not failure, failure


def ready_status(where: str) -> int:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/v2/health/ready")
        return conn.getresponse().status
    finally:
        conn.close()
