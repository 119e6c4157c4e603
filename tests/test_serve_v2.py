"""serve's Open Inference Protocol (KServe V2, docs/serve.md) driven by hand: REST requests built with http.client
against the protocol (JSON tensors; Triton's binary tensor data extension both ways, the answers parsed here), gRPC
through the stubs generated from Triton's grpc_service.proto (tritonclient.grpc.service_pb2: raw_input_contents and
typed contents, ModelStreamInfer with many requests in flight). Every answer is checked against a reference this code
does not compute: the example's ML-Agents ONNX run by onnxruntime here (deterministic outputs within 1e-5, discrete
actions equal) and `policy.act(..., deterministic=False, seed=s)` for the sampled ones. The servers run in this
process (fronts.serve.serving, on a thread). tests/test_v2_clients.py drives the same routes with tritonclient and
perf_analyzer (marker v2clients, CI's V2 clients leg)."""

import contextlib
import http.client
import json
import math
import os
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from api_standins import observation
from conftest import EXAMPLES

import inference as I

if os.environ.get("CI"):  # (requirements.txt installs them: CI runs these tests, never skips them)
    import aiohttp  # noqa: F401
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc
else:
    pytest.importorskip("aiohttp")
    pytest.importorskip("prometheus_client")
    grpc = pytest.importorskip("grpc")
    pb = pytest.importorskip("tritonclient.grpc.service_pb2")
    service_pb2_grpc = pytest.importorskip("tritonclient.grpc.service_pb2_grpc")

from conftest import dial, exchange, local_server  # noqa: E402  (after the skips: it needs nothing more)
from v2_reference import (  # noqa: E402
    Reference,
    assert_never_masked,
    check_against_reference,
    make_inputs,
    obs_tensors,
    outputs_of,
    random_masks,
    shapes_of,
)

from mlagents_inference.fronts.serve import serving  # noqa: E402
from mlagents_inference.services.batcher import ServeOptions  # noqa: E402

KINDS = ["vector", "discrete-multi", "hybrid", "lstm", "attention", "visual-simple"]
NP = {"FP32": np.float32, "INT64": np.int64, "UINT8": np.uint8, "INT32": np.int32, "FP64": np.float64}
GRPC_OPTIONS = [("grpc.enable_http_proxy", 0)]


# -- servers: one per kind, in this process, on --listen, --http and --grpc at once
@pytest.fixture(scope="module")
def servers():
    stack, made = contextlib.ExitStack(), {}

    def get(kind: str):
        if kind not in made:
            policy = I.load(EXAMPLES / kind)
            said = stack.enter_context(
                serving(policy, ServeOptions(), listen="127.0.0.1:0", http="127.0.0.1:0", grpc="127.0.0.1:0")
            )
            channel = grpc.insecure_channel(said["grpc"], options=GRPC_OPTIONS)
            stack.callback(channel.close)
            made[kind] = SimpleNamespace(
                kind=kind,
                policy=policy,
                name=policy.info["behavior"],
                http=said["http"],
                grpc=said["grpc"],
                listen=said["listen"],
                stub=service_pb2_grpc.GRPCInferenceServiceStub(channel),
                ref=Reference(kind),
                shapes=shapes_of(kind),
            )
        return made[kind]

    with stack:
        yield get


# -- REST by hand
def rest(where: str, method: str, path: str, body: bytes = None, headers: dict = None) -> tuple:
    """(status, headers, body) of one request."""
    conn = http.client.HTTPConnection(where, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def get_json(where: str, path: str) -> dict:
    status, _, body = rest(where, "GET", path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def tensor_json(name: str, array: np.ndarray, datatype: str = "FP32", nested: bool = False) -> dict:
    data = array.tolist() if nested else array.reshape(-1).tolist()
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": data}


def infer_json(srv, inputs: list, outputs=None, parameters=None, ident=None, path=None) -> tuple:
    msg = {"inputs": inputs}
    if outputs is not None:
        msg["outputs"] = [{"name": n} for n in outputs]
    if parameters is not None:
        msg["parameters"] = parameters
    if ident is not None:
        msg["id"] = ident
    status, headers, body = rest(
        srv.http,
        "POST",
        path or f"/v2/models/{srv.name}/infer",
        json.dumps(msg).encode(),
        {"Content-Type": "application/json"},
    )
    return status, headers, body


def rest_outputs(headers: dict, body: bytes) -> tuple:
    """An answer parsed by hand: (its JSON header, name -> array), binary outputs read from after the header in
    their order (Inference-Header-Content-Length, binary_data_size)."""
    n = int(headers["inference-header-content-length"]) if "inference-header-content-length" in headers else len(body)
    head, at, out = json.loads(body[:n]), n, {}
    for tensor in head["outputs"]:
        dtype, shape = np.dtype(NP[tensor["datatype"]]).newbyteorder("<"), tensor["shape"]
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is None:
            out[tensor["name"]] = np.asarray(tensor["data"], dtype).reshape(shape)
        else:
            assert size == math.prod(shape) * dtype.itemsize
            out[tensor["name"]] = np.frombuffer(body[at : at + size], dtype).reshape(shape)
            at += size
    assert at == len(body), "bytes after the outputs' binary data"
    return head, out


def binary_request(inputs: list, outputs: list = None, parameters: dict = None) -> tuple:
    """(body, headers) of a request with every input as binary data: [(name, datatype, array)]."""
    head = {
        "inputs": [
            {"name": n, "datatype": d, "shape": list(a.shape), "parameters": {"binary_data_size": a.nbytes}}
            for n, d, a in inputs
        ]
    }
    if outputs is not None:
        head["outputs"] = outputs
    if parameters is not None:
        head["parameters"] = parameters
    text = json.dumps(head).encode()
    body = text + b"".join(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes() for _, _, a in inputs)
    return body, {"Inference-Header-Content-Length": str(len(text)), "Content-Type": "application/octet-stream"}


def obs_inputs(obs: list, masks=None, memory=None) -> list:
    out = [tensor_json(f"obs_{k}", o) for k, o in enumerate(obs)]
    if masks is not None:
        out.append(tensor_json("action_masks", masks))
    if memory is not None:
        out.append(tensor_json("recurrent_in", memory))
    return out


# -- gRPC by hand
def param(value):
    if type(value) is bool:
        return pb.InferParameter(bool_param=value)
    if type(value) is int:
        return pb.InferParameter(int64_param=value)
    if type(value) is float:
        return pb.InferParameter(double_param=value)
    return pb.InferParameter(string_param=value)


def grpc_request(model: str, tensors: list, raw: bool = True, outputs=None, parameters=None, ident="", version=""):
    """A ModelInferRequest: [(name, datatype, array)], as raw_input_contents or typed contents."""
    request = pb.ModelInferRequest(model_name=model, model_version=version, id=ident)
    for name, datatype, array in tensors:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        if raw:
            request.raw_input_contents.append(
                np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
            )
        elif datatype == "FP32":
            tensor.contents.fp32_contents.extend(array.reshape(-1).tolist())
        elif datatype == "UINT8":
            tensor.contents.uint_contents.extend(array.reshape(-1).tolist())
        elif datatype in ("INT32", "INT8"):
            tensor.contents.int_contents.extend(array.reshape(-1).tolist())
        else:
            raise AssertionError(datatype)
    for name in outputs or ():
        request.outputs.add(name=name)
    for key, value in (parameters or {}).items():
        request.parameters[key].CopyFrom(param(value))
    return request


def grpc_outputs(response) -> dict:
    """name -> array, from raw_output_contents (as Triton answers) or typed contents."""
    out = {}
    for n, tensor in enumerate(response.outputs):
        dtype = np.dtype(NP[tensor.datatype]).newbyteorder("<")
        if response.raw_output_contents:
            out[tensor.name] = np.frombuffer(response.raw_output_contents[n], dtype).reshape(list(tensor.shape))
        else:
            field = {"FP32": "fp32_contents", "INT64": "int64_contents"}[tensor.datatype]
            out[tensor.name] = np.asarray(getattr(tensor.contents, field), dtype).reshape(list(tensor.shape))
    return out


def grpc_error(call) -> tuple:
    with pytest.raises(grpc.RpcError) as exc:
        call()
    return exc.value.code(), exc.value.details()


# ====================================================================================================================
@pytest.mark.parametrize("kind", KINDS)
def test_rest_json_answers_equal_onnxruntime_and_seeded_act(servers, kind):
    srv, rng = servers(kind), np.random.RandomState(KINDS.index(kind))
    for rows, seed in ((1, 3), (7, 11), (3, 2**63 - 5)):
        obs, masks = make_inputs(srv, rng, rows)
        memory = rng.randn(rows, 1, srv.policy.settings.memory_size).astype(np.float32) if kind == "lstm" else None
        status, headers, body = infer_json(
            srv, obs_inputs(obs, masks, memory), parameters={"seed": seed}, ident=f"req-{rows}"
        )
        assert status == 200 and headers["content-type"].startswith("application/json"), body
        head, got = rest_outputs(headers, body)
        assert head["model_name"] == srv.name and head["model_version"] == "1" and head["id"] == f"req-{rows}"
        names = [name for name, _, _ in outputs_of(srv)]
        assert [t["name"] for t in head["outputs"]] == names
        assert all(t["shape"][0] == rows for t in head["outputs"])
        check_against_reference(kind, srv.ref, srv.policy, got, obs, masks, seed, memory)
    # nested JSON data (row-major lists of lists) reads as the flat data does; outputs picked, in the asked order
    obs, masks = make_inputs(srv, rng, 2)
    inputs = [tensor_json(f"obs_{k}", o, nested=True) for k, o in enumerate(obs)]
    pick = outputs_of(srv)[::-1][:2]
    status, headers, body = infer_json(srv, inputs, outputs=[n for n, _, _ in pick])
    head, got = rest_outputs(headers, body)
    assert status == 200 and [t["name"] for t in head["outputs"]] == [n for n, _, _ in pick]
    assert [t["datatype"] for t in head["outputs"]] == [d for _, d, _ in pick]
    check_against_reference(kind, srv.ref, srv.policy, dict(got), obs)


@pytest.mark.parametrize("kind", ["hybrid", "discrete-multi", "visual-simple"])
def test_rest_binary_tensors_both_ways(servers, kind):
    srv, rng = servers(kind), np.random.RandomState(5)
    obs, masks = make_inputs(srv, rng, 6)
    tensors = obs_tensors(obs, masks)
    wanted = [n for n, _, _ in outputs_of(srv)]
    # every output as binary (binary_data_output), inputs binary
    body, headers = binary_request(tensors, parameters={"binary_data_output": True, "seed": 9})
    status, rh, answer = rest(srv.http, "POST", f"/v2/models/{srv.name}/infer", body, headers)
    assert status == 200, answer
    assert rh["content-type"] == "application/octet-stream" and int(rh["inference-header-content-length"]) < len(answer)
    head, got = rest_outputs(rh, answer)
    assert [t["name"] for t in head["outputs"]] == wanted
    assert all("data" not in t and t["parameters"]["binary_data_size"] > 0 for t in head["outputs"])
    check_against_reference(kind, srv.ref, srv.policy, got, obs, masks, 9)
    # some outputs binary, some JSON (binary_data per output), on /versions/1
    outputs = [{"name": n, "parameters": {"binary_data": i % 2 == 0}} for i, n in enumerate(wanted)]
    body, headers = binary_request(tensors, outputs=outputs, parameters={"seed": 9})
    status, rh, answer = rest(srv.http, "POST", f"/v2/models/{srv.name}/versions/1/infer", body, headers)
    head, mixed = rest_outputs(rh, answer)
    assert status == 200 and ["data" in t for t in head["outputs"]] == [i % 2 == 1 for i in range(len(wanted))]
    for name in wanted:
        np.testing.assert_array_equal(mixed[name], got[name])
    # a binary request with one input as JSON data beside binary ones; JSON answer
    head_json = {
        "inputs": [tensor_json("obs_0", obs[0])]
        + [
            {"name": n, "datatype": d, "shape": list(a.shape), "parameters": {"binary_data_size": a.nbytes}}
            for n, d, a in tensors[1:]
        ]
    }
    text = json.dumps(head_json).encode()
    body = text + b"".join(a.astype("<f4").tobytes() for _, _, a in tensors[1:])
    status, rh, answer = rest(
        srv.http, "POST", f"/v2/models/{srv.name}/infer", body, {"Inference-Header-Content-Length": str(len(text))}
    )
    assert status == 200 and "inference-header-content-length" not in rh, answer
    _, alone = rest_outputs(rh, answer)
    for name in wanted:
        if name.startswith("deterministic"):
            np.testing.assert_array_equal(alone[name], got[name])


def test_camera_takes_uint8_pixels_read_as_x_over_255(servers):
    srv, rng = servers("visual-simple"), np.random.RandomState(8)
    pixels = rng.randint(0, 256, (3, 3, 36, 36)).astype(np.uint8)
    vec = observation(rng, (5,), 3)
    want = srv.ref([pixels.astype(np.float32) / 255, vec])
    body, headers = binary_request([("obs_0", "UINT8", pixels), ("obs_1", "FP32", vec)])
    status, rh, answer = rest(srv.http, "POST", f"/v2/models/{srv.name}/infer", body, headers)
    assert status == 200, answer
    _, got = rest_outputs(rh, answer)
    np.testing.assert_allclose(
        got["deterministic_continuous_actions"], want["deterministic_continuous_actions"], rtol=0, atol=1e-5
    )
    for raw in (True, False):  # gRPC: raw bytes and typed uint_contents
        response = srv.stub.ModelInfer(
            grpc_request(srv.name, [("obs_0", "UINT8", pixels), ("obs_1", "FP32", vec)], raw=raw), timeout=60
        )
        np.testing.assert_allclose(
            grpc_outputs(response)["deterministic_continuous_actions"],
            want["deterministic_continuous_actions"],
            rtol=0,
            atol=1e-5,
        )
    # JSON UINT8 data too
    status, rh, answer = infer_json(srv, [tensor_json("obs_0", pixels, "UINT8"), tensor_json("obs_1", vec)])
    assert status == 200, answer
    np.testing.assert_allclose(
        rest_outputs(rh, answer)[1]["deterministic_continuous_actions"],
        want["deterministic_continuous_actions"],
        rtol=0,
        atol=1e-5,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_grpc_raw_and_typed_contents_equal_onnxruntime(servers, kind):
    srv, rng = servers(kind), np.random.RandomState(20 + KINDS.index(kind))
    for raw, rows, seed in ((True, 5, 4), (False, 3, 17)):
        obs, masks = make_inputs(srv, rng, rows)
        memory = rng.randn(rows, 1, srv.policy.settings.memory_size).astype(np.float32) if kind == "lstm" else None
        request = grpc_request(
            srv.name, obs_tensors(obs, masks, memory), raw=raw, parameters={"seed": seed}, ident="g7"
        )
        response = srv.stub.ModelInfer(request, timeout=60)
        assert response.model_name == srv.name and response.model_version == "1" and response.id == "g7"
        assert [(t.name, t.datatype) for t in response.outputs] == [(n, d) for n, d, _ in outputs_of(srv)]
        assert len(response.raw_output_contents) == len(response.outputs)  # (as Triton answers)
        check_against_reference(kind, srv.ref, srv.policy, grpc_outputs(response), obs, masks, seed, memory)
    # version "1" named; one output asked
    obs, masks = make_inputs(srv, rng, 2)
    name = outputs_of(srv)[0][0]
    response = srv.stub.ModelInfer(
        grpc_request(srv.name, obs_tensors(obs, masks), outputs=[name], version="1"), timeout=60
    )
    assert [t.name for t in response.outputs] == [name]


def test_grpc_stream_many_requests_in_flight_answered_in_order(servers):
    srv, rng = servers("discrete-multi"), np.random.RandomState(30)
    sent = []
    for i in range(24):
        obs, masks = make_inputs(srv, rng, 1 + i % 4)
        sent.append((obs, masks, 100 + i))
    requests = [
        grpc_request(srv.name, obs_tensors(obs, masks), raw=i % 2 == 0, parameters={"seed": seed}, ident=f"s{i}")
        for i, (obs, masks, seed) in enumerate(sent)
    ]
    bad = grpc_request(srv.name, [("obs_0", "FP32", np.zeros((1, 3), np.float32))], ident="bad")
    requests.insert(10, bad)
    gate = threading.Event()

    def iterate():  # every request is sent before any answer is read
        yield from requests
        gate.set()

    responses = list(srv.stub.ModelStreamInfer(iterate(), timeout=120))
    assert gate.is_set() and len(responses) == len(requests)
    assert responses[10].error_message and "\n" not in responses[10].error_message
    assert "obs_0" in responses[10].error_message
    good = responses[:10] + responses[11:]
    assert [r.error_message for r in good] == [""] * len(sent)
    assert [r.infer_response.id for r in good] == [f"s{i}" for i in range(len(sent))]
    for (obs, masks, seed), r in zip(sent, good):
        check_against_reference(srv.kind, srv.ref, srv.policy, grpc_outputs(r.infer_response), obs, masks, seed)


def test_lstm_sequences_keep_memory_on_the_server_rest_grpc_and_stream(servers):
    """Interleaved sequences (int and string ids; REST, ModelInfer and one ModelStreamInfer), each equal to the local
    rollout (policy.act with the memory carried from zeros) and to onnxruntime's; the end drops the memory."""
    srv, rng = servers("lstm"), np.random.RandomState(40)
    policy, size, steps = srv.policy, srv.policy.settings.memory_size, 8
    seqs = {101: "rest", "walker-a": "rest", 102: "grpc", "walker-b": "grpc", 103: "stream", "walker-c": "stream"}
    data = {s: ([observation(rng, (10,), 1) for _ in range(steps)], random_masks(rng, steps, [4])) for s in seqs}
    memory = {s: np.zeros((1, size), np.float32) for s in seqs}
    ref_memory = {s: np.zeros((1, 1, size), np.float32) for s in seqs}
    stream_requests, stream_want = [], []
    for t in range(steps):
        for s, via in seqs.items():
            obs, masks = [data[s][0][t]], data[s][1][t : t + 1]
            params = {"sequence_id": s, "sequence_start": t == 0, "sequence_end": t == steps - 1}
            local = policy.act(obs, action_masks=masks, memory=memory[s])
            ref = srv.ref(obs, masks, ref_memory[s])
            memory[s], ref_memory[s] = local["memory"], ref["recurrent_out"]
            want = (local, ref, masks)
            if via == "rest":
                status, headers, body = infer_json(srv, obs_inputs(obs, masks), parameters=params)
                assert status == 200, body
                check_step(rest_outputs(headers, body)[1], *want)
            elif via == "grpc":
                check_step(
                    grpc_outputs(
                        srv.stub.ModelInfer(
                            grpc_request(srv.name, obs_tensors(obs, masks), parameters=params), timeout=60
                        )
                    ),
                    *want,
                )
            else:
                stream_requests.append(grpc_request(srv.name, obs_tensors(obs, masks), parameters=params))
                stream_want.append(want)
    responses = list(srv.stub.ModelStreamInfer(iter(stream_requests), timeout=120))
    assert [r.error_message for r in responses] == [""] * len(stream_requests)
    for r, want in zip(responses, stream_want):
        check_step(grpc_outputs(r.infer_response), *want)
    # ended: a request without the start flag is refused; a start begins from zeros again
    obs, masks = [data[101][0][0]], data[101][1][:1]
    status, _, body = infer_json(srv, obs_inputs(obs, masks), parameters={"sequence_id": 101})
    assert status == 400 and "not started" in json.loads(body)["error"]
    code, details = grpc_error(
        lambda: srv.stub.ModelInfer(
            grpc_request(srv.name, obs_tensors(obs, masks), parameters={"sequence_id": "walker-b"})
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not started" in details
    status, headers, body = infer_json(
        srv, obs_inputs(obs, masks), parameters={"sequence_id": 101, "sequence_start": True}
    )
    first = policy.act(obs, action_masks=masks, memory=np.zeros((1, size), np.float32))
    check_step(rest_outputs(headers, body)[1], first, srv.ref(obs, masks), masks)
    infer_json(srv, obs_inputs(obs, masks), parameters={"sequence_id": 101, "sequence_end": True})


@contextlib.contextmanager
def lstm_server(monkeypatch, share: int, whole: int):
    """An LSTM server with small sequence bounds (each owner's share, every owner's together) and stubs on three
    channels: two from 127.0.0.1 (one owner: a host) and one from ::1 (another)."""
    from mlagents_inference.services import batcher

    monkeypatch.setattr(batcher, "CONNECTION_MEMORY_IDS", share)
    monkeypatch.setattr(batcher, "MEMORY_IDS", whole)
    policy = I.load(EXAMPLES / "lstm")
    with serving(policy, ServeOptions(), http="127.0.0.1:0", grpc=["127.0.0.1:0", "[::1]:0"]) as said:
        own = [*GRPC_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]  # (else a process's channels share one)
        channels = [grpc.insecure_channel(said["grpc"][k], options=own) for k in (0, 1, 0)]
        try:
            stubs = [service_pb2_grpc.GRPCInferenceServiceStub(c) for c in channels]
            yield SimpleNamespace(policy=policy, name=policy.info["behavior"], http=said["http"], stubs=stubs)
        finally:
            for c in channels:
                c.close()


def sequence_step(srv, stub, seq, obs, start=False):
    request = grpc_request(
        srv.name,
        [("obs_0", "FP32", obs)],
        outputs=["deterministic_discrete_actions", "recurrent_out"],
        parameters={"sequence_id": seq, "sequence_start": start},
    )
    return grpc_outputs(stub.ModelInfer(request, timeout=60))


def test_sequences_belong_to_their_client_and_a_flood_drops_only_its_own(monkeypatch):
    """One stream opening many sequences used to drop every other client's (one shared scope, least recently used
    first), with the JSON lines' advice. Now each client (a host, over gRPC or REST) has its own share: the
    flood drops its own oldest, whose next request is refused in V2's words; the other client's sequence goes on (from
    another connection of its host too), equal to the local rollout."""
    rng = np.random.RandomState(3)
    steps = [observation(rng, (10,), 1) for _ in range(3)]
    with lstm_server(monkeypatch, share=20, whole=1000) as srv:
        victim, flooder = srv.stubs[0], srv.stubs[1]
        got = [sequence_step(srv, victim, 7, steps[0], start=True), sequence_step(srv, victim, 7, steps[1])]
        flood = [
            grpc_request(srv.name, [("obs_0", "FP32", steps[0])], parameters={"sequence_id": k, "sequence_start": True})
            for k in range(1, 31)  # (0 is no sequence, as Triton's)
        ]
        answers = list(flooder.ModelStreamInfer(iter(flood), timeout=120))
        assert [a.error_message for a in answers] == [""] * 30
        got.append(sequence_step(srv, srv.stubs[2], 7, steps[2]))  # (another connection of the victim's host goes on)
        code, details = grpc_error(lambda: sequence_step(srv, flooder, 1, steps[1]))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert details.startswith("sequence 1: its memory was dropped") and "sequence_start" in details, details
        assert '"reset"' not in details and "bound of 20 sequences" in details, details
        # the same id on another client is another sequence: not started there
        code, details = grpc_error(lambda: sequence_step(srv, srv.stubs[2], 30, steps[1]))
        assert "not started" in details, details
    memory = None
    for obs, answer in zip(steps, got):
        want = srv.policy.act([obs], memory=memory)
        memory = want["memory"]
        np.testing.assert_array_equal(answer["deterministic_discrete_actions"], want["discrete_actions"])
        np.testing.assert_allclose(answer["recurrent_out"].reshape(1, -1), memory, rtol=0, atol=1e-5)


def test_a_start_past_the_servers_bound_is_refused_to_the_one_who_asked(monkeypatch):
    rng = np.random.RandomState(4)
    obs = observation(rng, (10,), 1)
    with lstm_server(monkeypatch, share=20, whole=30) as srv:
        first, second = srv.stubs[0], srv.stubs[1]
        for k in range(1, 21):
            sequence_step(srv, first, k, obs, start=True)
        for k in range(1, 11):
            sequence_step(srv, second, k, obs, start=True)
        code, details = grpc_error(lambda: sequence_step(srv, second, "one-more", obs, start=True))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith('sequence "one-more": the server'), (
            details
        )
        assert "sequence_end" in details and "\n" not in details, details
        for k in range(1, 21):  # nobody else's sequence was dropped for it
            sequence_step(srv, first, k, obs)
        for k in range(1, 11):
            sequence_step(srv, second, k, obs)


def test_a_string_sequence_id_has_a_length_limit(servers):
    srv = servers("lstm")
    obs = [tensor_json("obs_0", np.zeros((1, 10), np.float32))]
    status, _, body = infer_json(srv, obs, parameters={"sequence_id": "x" * (4 << 20), "sequence_start": True})
    assert status == 400 and json.loads(body)["error"] == (
        'parameter "sequence_id": a string longer than 256 characters'
    ), body[:300]
    status, _, body = infer_json(srv, obs, parameters={"sequence_id": "x" * 256, "sequence_start": True})
    assert status == 200, body[:300]


def check_step(got: dict, local: dict, ref: dict, masks) -> None:
    np.testing.assert_array_equal(got["deterministic_discrete_actions"], local["discrete_actions"])
    np.testing.assert_array_equal(got["deterministic_discrete_actions"], ref["deterministic_discrete_actions"])
    np.testing.assert_allclose(got["recurrent_out"].reshape(1, -1), local["memory"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["recurrent_out"], ref["recurrent_out"], rtol=0, atol=1e-5)
    assert_never_masked(got["deterministic_discrete_actions"], masks, [4])
    assert_never_masked(got["discrete_actions"], masks, [4])


@pytest.mark.parametrize("kind", ["discrete-multi", "attention"])
def test_a_masked_action_is_never_chosen(servers, kind):
    """One action allowed per branch (the rest masked), or a random few: neither the deterministic nor the sampled
    actions ever take a masked one, over REST and gRPC, whatever the seed."""
    srv, rng = servers(kind), np.random.RandomState(50)
    branches, rows = srv.ref.spec["discrete_branches"], 64
    obs = [observation(rng, shape, rows) for shape in srv.shapes]
    only = np.zeros((rows, sum(branches)), np.float32)
    offsets = np.cumsum([0, *branches[:-1]])
    allowed = np.stack([rng.randint(size, size=rows) for size in branches], 1)
    only[np.arange(rows)[:, None], offsets[None, :] + allowed] = 1
    for masks in (only, random_masks(rng, rows, branches)):
        for seed in (0, 1, 2):
            status, headers, body = infer_json(srv, obs_inputs(obs, masks), parameters={"seed": seed})
            assert status == 200, body
            got = rest_outputs(headers, body)[1]
            check_against_reference(kind, srv.ref, srv.policy, got, obs, masks, seed)
            response = srv.stub.ModelInfer(grpc_request(srv.name, obs_tensors(obs, masks), parameters={"seed": seed}))
            check_against_reference(kind, srv.ref, srv.policy, grpc_outputs(response), obs, masks, seed)
        if masks is only:
            np.testing.assert_array_equal(got["deterministic_discrete_actions"], allowed)
            np.testing.assert_array_equal(got["discrete_actions"], allowed)


def test_metadata_config_health_and_server_metadata(servers):
    for kind in ("vector", "lstm", "hybrid", "visual-simple"):
        srv = servers(kind)
        s = srv.policy.settings
        inputs = [{"name": f"obs_{k}", "datatype": "FP32", "shape": [-1, *shape]} for k, shape in enumerate(srv.shapes)]
        if s.discrete_branches:
            inputs.append({"name": "action_masks", "datatype": "FP32", "shape": [-1, sum(s.discrete_branches)]})
        if s.memory_size:
            inputs.append({"name": "recurrent_in", "datatype": "FP32", "shape": [-1, 1, s.memory_size]})
        outputs = [{"name": n, "datatype": d, "shape": [-1, *dims]} for n, d, dims in outputs_of(srv)]
        for path in (f"/v2/models/{srv.name}", f"/v2/models/{srv.name}/versions/1"):
            meta = get_json(srv.http, path)
            assert meta["name"] == srv.name and meta["versions"] == ["1"]
            assert meta["inputs"] == inputs and meta["outputs"] == outputs
            config = get_json(srv.http, path + "/config")
            assert config["name"] == srv.name and config["max_batch_size"] > 0
            assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
                (i["name"], "TYPE_" + i["datatype"], i["shape"][1:]) for i in inputs
            ]
            assert [i["optional"] for i in config["input"]] == [not i["name"].startswith("obs_") for i in inputs]
            assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
                (o["name"], "TYPE_" + o["datatype"], o["shape"][1:]) for o in outputs
            ]
            assert ("sequence_batching" in config) == bool(s.memory_size) != ("dynamic_batching" in config)
            assert rest(srv.http, "GET", path + "/ready")[0] == 200
        # gRPC: the same, in the generated messages
        gmeta = srv.stub.ModelMetadata(pb.ModelMetadataRequest(name=srv.name))
        assert gmeta.name == srv.name and list(gmeta.versions) == ["1"]
        assert [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in gmeta.inputs] == inputs
        assert [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in gmeta.outputs] == outputs
        gconfig = srv.stub.ModelConfig(pb.ModelConfigRequest(name=srv.name, version="1")).config
        assert gconfig.name == srv.name and gconfig.max_batch_size == config["max_batch_size"]
        assert [(i.name, list(i.dims)) for i in gconfig.input] == [(i["name"], i["dims"]) for i in config["input"]]
        assert gconfig.HasField("sequence_batching") == bool(s.memory_size)
        assert srv.stub.ModelReady(pb.ModelReadyRequest(name=srv.name)).ready
    assert rest(srv.http, "GET", "/v2/health/live")[0] == 200 and rest(srv.http, "GET", "/v2/health/ready")[0] == 200
    server = get_json(srv.http, "/v2")
    assert server["name"] and server["version"] == I.__version__
    assert {"binary_tensor_data", "model_configuration", "statistics", "sequence"} <= set(server["extensions"])
    gserver = srv.stub.ServerMetadata(pb.ServerMetadataRequest())
    assert (gserver.name, gserver.version, list(gserver.extensions)) == (
        server["name"],
        server["version"],
        server["extensions"],
    )
    assert srv.stub.ServerLive(pb.ServerLiveRequest()).live and srv.stub.ServerReady(pb.ServerReadyRequest()).ready


def test_statistics_move_with_the_requests(servers):
    srv, rng = servers("hybrid"), np.random.RandomState(60)

    def stats() -> dict:
        every = get_json(srv.http, "/v2/models/stats")["model_stats"]
        one = get_json(srv.http, f"/v2/models/{srv.name}/stats")["model_stats"]
        assert len(every) == 1 and every[0]["name"] == srv.name and one[0]["name"] == srv.name
        return one[0]

    before = stats()
    rows = [1, 3, 8]
    for n in rows:
        obs, masks = make_inputs(srv, rng, n)
        assert infer_json(srv, obs_inputs(obs, masks))[0] == 200
    obs, masks = make_inputs(srv, rng, 2)
    srv.stub.ModelInfer(grpc_request(srv.name, obs_tensors(obs, masks)))
    assert infer_json(srv, [tensor_json("obs_0", np.zeros((1, 3), np.float32))])[0] == 400
    after = stats()
    b, a = before["inference_stats"], after["inference_stats"]
    assert a["success"]["count"] - b["success"]["count"] == 4
    assert a["fail"]["count"] - b["fail"]["count"] == 1
    assert after["inference_count"] - before["inference_count"] == sum(rows) + 2
    assert 1 <= after["execution_count"] - before["execution_count"] <= 4
    for name in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert a[name]["count"] - b[name]["count"] == 4, name
        assert a[name]["ns"] > b[name]["ns"], name  # real time measured
    spent = a["success"]["ns"] - b["success"]["ns"]
    parts = sum(a[n]["ns"] - b[n]["ns"] for n in ("queue", "compute_input", "compute_infer", "compute_output"))
    assert 0 < parts <= spent < 60e9
    assert after["last_inference"] >= before["last_inference"] and after["last_inference"] > 1.6e12  # ms since 1970
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in after["batch_stats"]}
    old = {b["batch_size"]: b["compute_infer"]["count"] for b in before["batch_stats"]}
    assert sum(sizes.values()) == after["execution_count"] and sizes.get(8, 0) >= old.get(8, 0) + 1
    # the same figures through gRPC
    g = srv.stub.ModelStatistics(pb.ModelStatisticsRequest(name=srv.name)).model_stats
    assert len(g) == 1 and g[0].name == srv.name and g[0].version == "1"
    assert g[0].inference_count == after["inference_count"] and g[0].execution_count == after["execution_count"]
    assert g[0].inference_stats.success.count == a["success"]["count"]
    assert g[0].inference_stats.fail.count == a["fail"]["count"]
    assert len(srv.stub.ModelStatistics(pb.ModelStatisticsRequest()).model_stats) == 1


# -- errors: one line each, and the server goes on
def _good_rest(srv) -> list:
    z = np.zeros
    return [tensor_json("obs_0", z((2, 20), np.float32)), tensor_json("obs_1", z((2, 6), np.float32))]


def rest_bad_cases(srv, lstm) -> list:
    """(what, server, method, path, body, headers, status, words in the error)."""
    infer, good = f"/v2/models/{srv.name}/infer", _good_rest(srv)
    ones = np.ones((2, 10), np.float32)

    def body(msg):
        return json.dumps(msg).encode()

    half_mask = ones.copy()
    half_mask[0, 1] = 0.5
    nan_obs = np.zeros((1, 20), np.float32)
    nan_obs[0, 3] = np.nan
    nan_body, nan_headers = binary_request(
        [("obs_0", "FP32", nan_obs), ("obs_1", "FP32", np.zeros((1, 6), np.float32))]
    )
    bin_body, bin_headers = binary_request(
        [("obs_0", "FP32", np.zeros((1, 20), np.float32)), ("obs_1", "FP32", np.zeros((1, 6), np.float32))]
    )
    header_len = int(bin_headers["Inference-Header-Content-Length"])
    lstm_in = [tensor_json("obs_0", np.zeros((1, 10), np.float32))]
    return [
        ("unknown model", srv, "POST", "/v2/models/Nope/infer", body({"inputs": good}), {}, 404, ["Nope"]),
        (
            "unknown version",
            srv,
            "POST",
            f"/v2/models/{srv.name}/versions/2/infer",
            body({"inputs": good}),
            {},
            404,
            ["version"],
        ),
        ("unknown model metadata", srv, "GET", "/v2/models/Nope", None, {}, 404, ["Nope"]),
        ("unknown model config", srv, "GET", "/v2/models/Nope/config", None, {}, 404, ["Nope"]),
        ("unknown version stats", srv, "GET", f"/v2/models/{srv.name}/versions/7/stats", None, {}, 404, ["version"]),
        (
            "wrong shape",
            srv,
            "POST",
            infer,
            body({"inputs": [tensor_json("obs_0", np.zeros((2, 19), np.float32)), good[1]]}),
            {},
            400,
            ["obs_0", "shape"],
        ),
        (
            "too many dimensions",
            srv,
            "POST",
            infer,
            body({"inputs": [tensor_json("obs_0", np.zeros((2, 1, 20), np.float32)), good[1]]}),
            {},
            400,
            ["obs_0", "shape"],
        ),
        (
            "wrong datatype",
            srv,
            "POST",
            infer,
            body({"inputs": [{**good[0], "datatype": "INT32"}, good[1]]}),
            {},
            400,
            ["obs_0", "INT32"],
        ),
        (
            "no such datatype",
            srv,
            "POST",
            infer,
            body({"inputs": [{**good[0], "datatype": "FP33"}, good[1]]}),
            {},
            400,
            ["obs_0", "FP33"],
        ),
        (
            "data count",
            srv,
            "POST",
            infer,
            body({"inputs": [{**good[0], "data": [0.0] * 39}, good[1]]}),
            {},
            400,
            ["obs_0", "39"],
        ),
        (
            "data not numbers",
            srv,
            "POST",
            infer,
            body({"inputs": [{**good[0], "data": ["a"] * 40}, good[1]]}),
            {},
            400,
            ["obs_0"],
        ),
        ("missing obs", srv, "POST", infer, body({"inputs": good[:1]}), {}, 400, ["obs_1", "missing"]),
        (
            "unknown input",
            srv,
            "POST",
            infer,
            body({"inputs": [*good, tensor_json("obs_7", np.zeros((2, 3), np.float32))]}),
            {},
            400,
            ["obs_7"],
        ),
        ("input twice", srv, "POST", infer, body({"inputs": [*good, good[0]]}), {}, 400, ["obs_0", "twice"]),
        (
            "unknown output",
            srv,
            "POST",
            infer,
            body({"inputs": good, "outputs": [{"name": "value_estimate"}]}),
            {},
            400,
            ["value_estimate"],
        ),
        (
            "output twice",
            srv,
            "POST",
            infer,
            body({"inputs": good, "outputs": [{"name": "discrete_actions"}] * 2}),
            {},
            400,
            ["twice"],
        ),
        (
            "rows mismatch",
            srv,
            "POST",
            infer,
            body({"inputs": [good[0], tensor_json("obs_1", np.zeros((3, 6), np.float32))]}),
            {},
            400,
            ["rows"],
        ),
        (
            "no rows",
            srv,
            "POST",
            infer,
            body(
                {
                    "inputs": [
                        tensor_json("obs_0", np.zeros((0, 20), np.float32)),
                        tensor_json("obs_1", np.zeros((0, 6), np.float32)),
                    ]
                }
            ),
            {},
            400,
            ["rows"],
        ),
        ("bad JSON", srv, "POST", infer, b'{"inputs": [', {}, 400, ["JSON"]),
        ("not an object", srv, "POST", infer, b"[1, 2]", {}, 400, ["object"]),
        ("no inputs", srv, "POST", infer, body({"inputs": []}), {}, 400, ["inputs"]),
        ("unknown key", srv, "POST", infer, body({"inputs": good, "priority": 1}), {}, 400, ["priority"]),
        (
            "header length not a number",
            srv,
            "POST",
            infer,
            bin_body,
            {"Inference-Header-Content-Length": "ten"},
            400,
            ["Inference-Header-Content-Length"],
        ),
        (
            "header length past the body",
            srv,
            "POST",
            infer,
            bin_body,
            {"Inference-Header-Content-Length": str(len(bin_body) + 5)},
            400,
            ["Inference-Header-Content-Length"],
        ),
        (
            "header length cuts the JSON",
            srv,
            "POST",
            infer,
            bin_body,
            {"Inference-Header-Content-Length": str(header_len - 3)},
            400,
            ["JSON"],
        ),
        (
            "binary size past the data",
            srv,
            "POST",
            infer,
            bin_body[:-4],
            {"Inference-Header-Content-Length": str(header_len)},
            400,
            ["binary_data_size"],
        ),
        (
            "bytes left over",
            srv,
            "POST",
            infer,
            bin_body + b"\0" * 4,
            {"Inference-Header-Content-Length": str(header_len)},
            400,
            ["4 bytes"],
        ),
        ("binary size not the shape's", srv, "POST", infer, *_binary_size_off(), 400, ["obs_0", "bytes"]),
        ("NaN observation", srv, "POST", infer, nan_body, nan_headers, 400, ["nan"]),
        (
            "masks not 0 or 1",
            srv,
            "POST",
            infer,
            body({"inputs": [*good, tensor_json("action_masks", half_mask)]}),
            {},
            400,
            ["action_masks", "0", "1"],
        ),
        (
            "a branch all masked",
            srv,
            "POST",
            infer,
            body(
                {
                    "inputs": [
                        *good,
                        tensor_json(
                            "action_masks", np.concatenate([np.zeros((2, 3)), np.ones((2, 7))], 1).astype(np.float32)
                        ),
                    ]
                }
            ),
            {},
            400,
            ["branch 0"],
        ),
        (
            "seed out of range",
            srv,
            "POST",
            infer,
            body({"inputs": good, "parameters": {"seed": 2**64}}),
            {},
            400,
            ["seed"],
        ),
        (
            "seed not a number",
            srv,
            "POST",
            infer,
            body({"inputs": good, "parameters": {"seed": "one"}}),
            {},
            400,
            ["seed"],
        ),
        ("seed not whole", srv, "POST", infer, body({"inputs": good, "parameters": {"seed": 1.5}}), {}, 400, ["seed"]),
        (
            "binary_data_output not a bool",
            srv,
            "POST",
            infer,
            body({"inputs": good, "parameters": {"binary_data_output": 1}}),
            {},
            400,
            ["binary_data_output"],
        ),
        (
            "sequence without start",
            lstm,
            "POST",
            f"/v2/models/{lstm.name}/infer",
            body({"inputs": lstm_in, "parameters": {"sequence_id": 987}}),
            {},
            400,
            ["987", "sequence_start"],
        ),
        (
            "sequence of two rows",
            lstm,
            "POST",
            f"/v2/models/{lstm.name}/infer",
            body(
                {
                    "inputs": [tensor_json("obs_0", np.zeros((2, 10), np.float32))],
                    "parameters": {"sequence_id": 5, "sequence_start": True},
                }
            ),
            {},
            400,
            ["one row"],
        ),
        (
            "sequence_start not a bool",
            lstm,
            "POST",
            f"/v2/models/{lstm.name}/infer",
            body({"inputs": lstm_in, "parameters": {"sequence_id": 5, "sequence_start": "yes"}}),
            {},
            400,
            ["sequence_start"],
        ),
        (
            "recurrent_in wrong shape",
            lstm,
            "POST",
            f"/v2/models/{lstm.name}/infer",
            body({"inputs": [*lstm_in, tensor_json("recurrent_in", np.zeros((1, 32), np.float32))]}),
            {},
            400,
            ["recurrent_in", "shape"],
        ),
    ]


def _binary_size_off() -> tuple:
    """obs_0 given 19 values' bytes for a [1, 20] shape (the sizes add up to the data after the header)."""
    text = json.dumps(
        {
            "inputs": [
                {"name": "obs_0", "datatype": "FP32", "shape": [1, 20], "parameters": {"binary_data_size": 76}},
                {"name": "obs_1", "datatype": "FP32", "shape": [1, 6], "parameters": {"binary_data_size": 24}},
            ]
        }
    ).encode()
    return text + b"\0" * 100, {"Inference-Header-Content-Length": str(len(text))}


def test_bad_rest_requests_get_one_line_errors_and_the_server_goes_on(servers):
    srv, lstm = servers("discrete-multi"), servers("lstm")
    good = json.dumps({"inputs": _good_rest(srv), "parameters": {"seed": 1}}).encode()
    _, _, want = rest(srv.http, "POST", f"/v2/models/{srv.name}/infer", good)
    failures = []
    for what, where, method, path, body, headers, status, words in rest_bad_cases(srv, lstm):
        got, rh, answer = rest(where.http, method, path, body, headers)
        try:
            assert got == status, (got, answer)
            assert rh["content-type"].startswith("application/json")
            assert answer.count(b"\n") <= 1 and answer.strip().count(b"\n") == 0, answer
            msg = json.loads(answer)
            assert list(msg) == ["error"] and isinstance(msg["error"], str) and msg["error"], msg
            assert "\n" not in msg["error"] and "Traceback" not in msg["error"] and len(msg["error"]) < 400
            for word in words:
                assert word.lower() in msg["error"].lower(), (word, msg["error"])
        except AssertionError as exc:
            failures.append(f"{what}: {exc}")
        # the server goes on: the same good request, the same answer
        assert rest(srv.http, "POST", f"/v2/models/{srv.name}/infer", good)[2] == want, what
    assert not failures, "\n".join(failures)


def grpc_bad_cases(srv, lstm) -> list:
    """(what, server, call name, request, code, words)."""
    z, name = np.zeros, srv.name
    good = [("obs_0", "FP32", z((2, 20), np.float32)), ("obs_1", "FP32", z((2, 6), np.float32))]
    half_mask = np.ones((2, 10), np.float32)
    half_mask[1, 4] = 0.5
    nan_obs = z((2, 20), np.float32)
    nan_obs[1, 0] = np.nan
    raw_short = grpc_request(name, good)
    raw_short.raw_input_contents[0] = raw_short.raw_input_contents[0][:-4]
    raw_missing = grpc_request(name, good)
    del raw_missing.raw_input_contents[1]
    NF, IA = grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT
    lstm_in = [("obs_0", "FP32", z((1, 10), np.float32))]
    return [
        ("unknown model", srv, "ModelInfer", grpc_request("Nope", good), NF, ["Nope"]),
        ("unknown version", srv, "ModelInfer", grpc_request(name, good, version="3"), NF, ["version"]),
        ("unknown model metadata", srv, "ModelMetadata", pb.ModelMetadataRequest(name="Nope"), NF, ["Nope"]),
        ("unknown model config", srv, "ModelConfig", pb.ModelConfigRequest(name="Nope"), NF, ["Nope"]),
        ("unknown model ready", srv, "ModelReady", pb.ModelReadyRequest(name=name, version="2"), NF, ["version"]),
        ("unknown model stats", srv, "ModelStatistics", pb.ModelStatisticsRequest(name="Nope"), NF, ["Nope"]),
        (
            "wrong shape",
            srv,
            "ModelInfer",
            grpc_request(name, [("obs_0", "FP32", z((2, 21), np.float32)), good[1]]),
            IA,
            ["obs_0", "shape"],
        ),
        (
            "wrong datatype",
            srv,
            "ModelInfer",
            grpc_request(name, [("obs_0", "INT32", z((2, 20), np.int32)), good[1]]),
            IA,
            ["obs_0", "INT32"],
        ),
        (
            "wrong datatype, typed",
            srv,
            "ModelInfer",
            grpc_request(name, [("obs_0", "INT32", z((2, 20), np.int32)), good[1]], raw=False),
            IA,
            ["obs_0", "INT32"],
        ),
        ("typed contents short", srv, "ModelInfer", _typed_short(name, good), IA, ["obs_0"]),
        ("missing obs", srv, "ModelInfer", grpc_request(name, good[1:]), IA, ["obs_0", "missing"]),
        (
            "unknown input",
            srv,
            "ModelInfer",
            grpc_request(name, [*good, ("extra", "FP32", z((2, 1), np.float32))]),
            IA,
            ["extra"],
        ),
        (
            "unknown output",
            srv,
            "ModelInfer",
            grpc_request(name, good, outputs=["continuous_actions"]),
            IA,
            ["continuous_actions"],
        ),
        (
            "rows mismatch",
            srv,
            "ModelInfer",
            grpc_request(name, [good[0], ("obs_1", "FP32", z((1, 6), np.float32))]),
            IA,
            ["rows"],
        ),
        ("raw size mismatch", srv, "ModelInfer", raw_short, IA, ["obs_0", "bytes"]),
        ("raw contents count", srv, "ModelInfer", raw_missing, IA, ["raw_input_contents"]),
        ("NaN observation", srv, "ModelInfer", grpc_request(name, [("obs_0", "FP32", nan_obs), good[1]]), IA, ["nan"]),
        (
            "masks not 0 or 1",
            srv,
            "ModelInfer",
            grpc_request(name, [*good, ("action_masks", "FP32", half_mask)]),
            IA,
            ["action_masks"],
        ),
        ("seed not a number", srv, "ModelInfer", grpc_request(name, good, parameters={"seed": "one"}), IA, ["seed"]),
        ("seed not whole", srv, "ModelInfer", grpc_request(name, good, parameters={"seed": 0.5}), IA, ["seed"]),
        (
            "sequence without start",
            lstm,
            "ModelInfer",
            grpc_request(lstm.name, lstm_in, parameters={"sequence_id": "nobody"}),
            IA,
            ["nobody", "sequence_start"],
        ),
        (
            "sequence of two rows",
            lstm,
            "ModelInfer",
            grpc_request(
                lstm.name,
                [("obs_0", "FP32", z((2, 10), np.float32))],
                parameters={"sequence_id": 4, "sequence_start": True},
            ),
            IA,
            ["one row"],
        ),
    ]


def _typed_short(name, good):
    request = grpc_request(name, good, raw=False)
    del request.inputs[0].contents.fp32_contents[-1]
    return request


def test_bad_grpc_requests_get_one_line_errors_and_the_server_goes_on(servers):
    srv, lstm = servers("discrete-multi"), servers("lstm")
    good = grpc_request(
        srv.name,
        [("obs_0", "FP32", np.ones((2, 20), np.float32)), ("obs_1", "FP32", np.ones((2, 6), np.float32))],
        parameters={"seed": 1},
    )
    want = srv.stub.ModelInfer(good, timeout=60)
    failures = []
    for what, where, method, request, code, words in grpc_bad_cases(srv, lstm):
        got_code, details = grpc_error(lambda: getattr(where.stub, method)(request, timeout=60))
        try:
            assert got_code == code, (got_code, details)
            assert details and "\n" not in details and "Traceback" not in details and len(details) < 400, details
            for word in words:
                assert word.lower() in details.lower(), (word, details)
        except AssertionError as exc:
            failures.append(f"{what}: {exc}")
        assert srv.stub.ModelInfer(good, timeout=60) == want, what
    assert not failures, "\n".join(failures)
    # in a stream: each refused request gets its error_message, the stream goes on
    requests = [
        request
        for _, where, method, request, _, _ in grpc_bad_cases(srv, lstm)
        if method == "ModelInfer" and where is srv
    ]
    mixed = [x for r in requests for x in (r, good)]
    responses = list(srv.stub.ModelStreamInfer(iter(mixed), timeout=120))
    assert len(responses) == len(mixed)
    for n, r in enumerate(responses):
        if n % 2:
            assert not r.error_message and r.infer_response == want
        else:
            assert r.error_message and "\n" not in r.error_message


def test_a_tensor_whose_values_are_given_twice_is_refused_in_one_line(servers):
    """Typed contents and raw_input_contents (gRPC), "data" and binary_data_size (REST): which values were meant is
    not the server's guess (it used to answer from one and ignore the other); Triton refuses both, so does this."""
    srv = servers("vector")
    obs = np.full((1, 8), 0.25, np.float32)
    request = grpc_request(srv.name, [("obs_0", "FP32", obs)])
    request.inputs[0].contents.fp32_contents.extend([9.0] * 8)  # (other values than the raw ones)
    code, details = grpc_error(lambda: srv.stub.ModelInfer(request, timeout=60))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "\n" not in details, details
    assert "obs_0" in details and "contents" in details and "raw_input_contents" in details, details
    (stream_answer,) = list(srv.stub.ModelStreamInfer(iter([request]), timeout=60))
    assert "raw_input_contents" in stream_answer.error_message
    body, headers = binary_request([("obs_0", "FP32", obs)])
    head_len = int(headers["Inference-Header-Content-Length"])
    head = json.loads(body[:head_len])
    head["inputs"][0]["data"] = [9.0] * 8
    text = json.dumps(head).encode()
    status, _, answer = rest(
        srv.http,
        "POST",
        f"/v2/models/{srv.name}/infer",
        text + body[head_len:],
        {"Inference-Header-Content-Length": str(len(text))},
    )
    error = json.loads(answer)["error"]
    assert status == 400 and "obs_0" in error and '"data"' in error and "binary_data_size" in error, error
    assert "\n" not in error


@pytest.mark.parametrize(
    "data",
    [["0.5"] * 8, ["1e3"] + [0.0] * 7, [True] + [0.0] * 7, [None] * 8, [[0.0] * 4, ["x"] * 4]],
    ids=["strings", "a-string-number", "a-boolean", "nulls", "nested-strings"],
)
def test_rest_data_that_is_not_numbers_is_refused_as_the_json_lines_refuse_it(servers, data):
    srv = servers("vector")
    shape = [1, 8] if not isinstance(data[0], list) else [1, 2, 4]
    tensor = {"name": "obs_0", "datatype": "FP32", "shape": shape, "data": data}
    status, _, body = infer_json(srv, [tensor])
    assert status == 400, body
    assert json.loads(body)["error"] == 'input "obs_0": "data" must hold numbers only (FP32)'


def test_v2_parameters_are_held_to_their_protocol_types(servers):
    """A "binary_data" of "false" is a string, not false: refused (it used to be read as true: a binary answer)."""
    srv = servers("vector")
    inputs = [tensor_json("obs_0", np.zeros((1, 8), np.float32))]
    for bad in ("false", 0, 1, [], {}):
        msg = {"inputs": inputs, "outputs": [{"name": "deterministic_continuous_actions", "parameters": {}}]}
        msg["outputs"][0]["parameters"]["binary_data"] = bad
        status, headers, body = rest(srv.http, "POST", f"/v2/models/{srv.name}/infer", json.dumps(msg).encode())
        assert status == 400 and "inference-header-content-length" not in headers, (bad, body)
        assert '"binary_data": expected true or false' in json.loads(body)["error"], body
    for bad in ("true", 1):
        status, _, body = infer_json(srv, inputs, parameters={"binary_data_output": bad})
        assert status == 400 and "binary_data_output" in json.loads(body)["error"], (bad, body)
    for key, bad in (("sequence_start", "true"), ("seed", "7"), ("seed", 1.5), ("sequence_end", 1)):
        lstm = servers("lstm")
        status, _, body = infer_json(
            lstm, [tensor_json("obs_0", np.zeros((1, 10), np.float32))], parameters={"sequence_id": 3, key: bad}
        )
        assert status == 400 and f'parameter "{key}"' in json.loads(body)["error"], (key, bad, body)
    msg = {"inputs": inputs, "outputs": [{"name": "deterministic_continuous_actions", "parameters": {}}]}
    msg["outputs"][0]["parameters"]["binary_data"] = False
    status, headers, body = rest(srv.http, "POST", f"/v2/models/{srv.name}/infer", json.dumps(msg).encode())
    assert status == 200 and "inference-header-content-length" not in headers, body


def test_unknown_routes_and_methods_are_refused_without_harm(servers):
    """Routes this server lacks under /v2 (shared memory, trace, logging), the repository's without
    --allow-model-control, and a wrong method: 404, 403 and 405 with a one-line {"error"} as every V2 refusal
    (Triton's clients read the body as JSON)."""
    srv = servers("vector")
    for method, path, status in (
        ("GET", f"/v2/models/{srv.name}/infer", 405),
        ("GET", "/v2/repository/index", 405),
        ("GET", "/v2/systemsharedmemory/status", 404),
        ("POST", "/v2/cudasharedmemory/region/x/register", 404),
        ("GET", "/v2/trace/setting", 404),
        ("GET", "/v2/logging", 404),
        ("DELETE", "/v2", 405),
    ):
        got, headers, body = rest(srv.http, method, path, b"{}" if method == "POST" else None)
        assert got == status and headers["content-type"].startswith("application/json"), (path, got, body)
        message = json.loads(body)
        assert list(message) == ["error"] and path in message["error"] and "\n" not in message["error"], message
        assert status == 404 or headers.get("allow")  # (a 405 says what is allowed)
    got, _, body = rest(srv.http, "POST", "/v2/repository/index", b"{}")
    off = "the repository API is off: start serve with --allow-model-control to load and unload"
    assert (got, json.loads(body)) == (403, {"error": off})
    assert grpc_error(lambda: srv.stub.RepositoryIndex(pb.RepositoryIndexRequest())) == (
        grpc.StatusCode.PERMISSION_DENIED,
        off,
    )
    assert srv.stub.ServerLive(pb.ServerLiveRequest()).live


# -- one batcher: V2 requests and JSON lines in one engine call
def test_v2_requests_and_json_lines_share_one_engine_call():
    policy, ref = I.load(EXAMPLES / "vector"), Reference("vector")
    rng = np.random.RandomState(70)
    with (
        serving(
            policy, ServeOptions(max_wait_us=400_000), listen="127.0.0.1:0", http="127.0.0.1:0", grpc="127.0.0.1:0"
        ) as said,
        grpc.insecure_channel(said["grpc"], options=GRPC_OPTIONS) as channel,
    ):
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        srv = SimpleNamespace(http=said["http"], name="Vector")
        with dial(said["listen"]) as sock:
            exchange(sock, [{"obs": [0.0] * 8}])  # (connected, and the first pass done)
            for attempt in range(3):
                before = get_json(said["http"], "/v2/models/Vector/stats")["model_stats"][0]
                lines_obs, rest_obs, grpc_obs = (observation(rng, (8,), n) for n in (3, 4, 5))
                got = {}

                def by_rest():
                    got["rest"] = infer_json(srv, [tensor_json("obs_0", rest_obs)])

                def by_grpc():
                    got["grpc"] = stub.ModelInfer(grpc_request("Vector", [("obs_0", "FP32", grpc_obs)]), timeout=60)

                threads = [threading.Thread(target=by_rest), threading.Thread(target=by_grpc)]
                t0 = time.monotonic()
                for t in threads:
                    t.start()
                answers = exchange(sock, [{"id": i, "obs": o.tolist()} for i, o in enumerate(lines_obs)])
                for t in threads:
                    t.join(60)
                took = time.monotonic() - t0
                after = get_json(said["http"], "/v2/models/Vector/stats")["model_stats"][0]
                sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in after["batch_stats"]}
                old = {b["batch_size"]: b["compute_infer"]["count"] for b in before["batch_stats"]}
                # every answer right, whichever call it rode in
                np.testing.assert_allclose(
                    [a["continuous_actions"] for a in answers],
                    ref([lines_obs])["deterministic_continuous_actions"],
                    rtol=0,
                    atol=1e-5,
                )
                status, headers, body = got["rest"]
                np.testing.assert_allclose(
                    rest_outputs(headers, body)[1]["deterministic_continuous_actions"],
                    ref([rest_obs])["deterministic_continuous_actions"],
                    rtol=0,
                    atol=1e-5,
                )
                np.testing.assert_allclose(
                    grpc_outputs(got["grpc"])["deterministic_continuous_actions"],
                    ref([grpc_obs])["deterministic_continuous_actions"],
                    rtol=0,
                    atol=1e-5,
                )
                if after["execution_count"] - before["execution_count"] == 1 and sizes.get(12, 0) == old.get(12, 0) + 1:
                    break  # 3 lines + 4 rows + 5 rows: one engine call of 12 rows
                assert took > 0.3, "the pass did not wait --max-wait-us"
            else:
                raise AssertionError(f"never one engine call: {after['batch_stats']}")
        status, _, metrics = rest(said["http"], "GET", "/metrics")
    assert status == 200 and b"mlagents_serve_batch_lines_bucket" in metrics


def test_grpc_requests_sent_at_once_share_engine_calls():
    """64 ModelInfer calls in flight at once (--max-wait-us 0): grpcio hands them to the loop one at a time, a few
    turns apart, and the pass waits until a few turns bring none, so they ride in a handful of engine calls (counted
    by the statistics, ModelStatistics' execution_count; not a timing). Every answer is its own row's."""
    policy, ref = I.load(EXAMPLES / "vector"), Reference("vector")
    obs = np.random.RandomState(71).standard_normal((64, 8)).astype(np.float32)
    with (
        serving(policy, ServeOptions(), grpc="127.0.0.1:0") as said,
        grpc.insecure_channel(said["grpc"], options=GRPC_OPTIONS) as channel,
    ):
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        stats = pb.ModelStatisticsRequest(name="Vector")
        requests = [grpc_request("Vector", [("obs_0", "FP32", obs[i : i + 1])]) for i in range(64)]
        stub.ModelInfer(requests[0], timeout=60)
        calls = []
        for _ in range(20):  # (rounds differ widely with the machine's load: the fewest calls of twenty is judged)
            before = stub.ModelStatistics(stats, timeout=60).model_stats[0]
            answers = [f.result(timeout=60) for f in [stub.ModelInfer.future(r, timeout=60) for r in requests]]
            after = stub.ModelStatistics(stats, timeout=60).model_stats[0]
            assert after.inference_count - before.inference_count == 64
            calls.append(after.execution_count - before.execution_count)
            got = np.concatenate([grpc_outputs(a)["deterministic_continuous_actions"] for a in answers])
            np.testing.assert_allclose(got, ref([obs])["deterministic_continuous_actions"], rtol=0, atol=1e-5)
    # (16 loop turns counted from the first request took 16-32 calls a round; counted from the last one, 4-11)
    assert min(calls) <= 12, f"64 requests at once took {calls} engine calls a round"


def test_listen_http_and_grpc_given_twice_on_the_command_line_listen_on_each():
    model = EXAMPLES / "vector"
    extra = ["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--http", "127.0.0.1:0"]
    extra += ["--grpc", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]
    obs = np.full((1, 8), 0.5, np.float32)
    want = Reference("vector")([obs])["deterministic_continuous_actions"]
    with local_server(model, "127.0.0.1:0", *extra) as (_, said):
        assert len(said["listen"]) == 2 and len(set(said["listen"])) == 2, said
        assert len(said["http"]) == 2 and len(said["grpc"]) == 2, said
        for where in said["listen"]:
            with dial(where) as sock:
                answer = exchange(sock, [{"obs": obs[0].tolist()}])[0]
                np.testing.assert_allclose([answer["continuous_actions"]], want, rtol=0, atol=1e-5)
        for where in said["http"]:
            status, headers, body = infer_json(SimpleNamespace(http=where, name="Vector"), [tensor_json("obs_0", obs)])
            np.testing.assert_allclose(
                rest_outputs(headers, body)[1]["deterministic_continuous_actions"], want, rtol=0, atol=1e-5
            )
        for where in said["grpc"]:
            with grpc.insecure_channel(where, options=GRPC_OPTIONS) as channel:
                stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
                response = stub.ModelInfer(grpc_request("Vector", [("obs_0", "FP32", obs)]), timeout=60)
                np.testing.assert_allclose(
                    grpc_outputs(response)["deterministic_continuous_actions"], want, rtol=0, atol=1e-5
                )


@pytest.mark.parametrize("rows", [1, 3, 300])
def test_grpc_answers_wire_bytes_are_the_messages_protobuf_writes(rows):
    """ModelInfer's answer is written as wire bytes (open_inference.grpc_answer, no message classes): the very bytes
    protobuf writes for the ModelInferResponse the test builds from the same outputs (field order, packed shapes,
    long ids and tensors past one varint byte), the second answer of a shape (its fixed part kept) as the first, and
    ModelStreamInfer's wrapper the ModelStreamInferResponse protobuf writes around it."""
    from mlagents_inference.services.open_inference import ModelView, grpc_answer, grpc_stream_answer

    view = ModelView(I.load(EXAMPLES / "hybrid"))
    rng = np.random.default_rng(rows)
    types = {n: d for n, d, _ in view.outputs}
    for ident in (None, "abc", "x" * 300):
        wanted = list(reversed(view.output_names))  # (the order asked for, not the model's)
        outputs = {
            n: (rng.integers(0, 5, (rows, *s[1:])) if types[n] == "INT64" else rng.standard_normal((rows, *s[1:])))
            for n, _, s in view.outputs
        }
        outputs = {n: a.astype(np.int64 if types[n] == "INT64" else np.float32) for n, a in outputs.items()}
        job = SimpleNamespace(view=view, wanted=wanted, outputs=outputs, ident=ident)
        expected = pb.ModelInferResponse(
            model_name=view.name,
            model_version=view.version,
            id=ident or "",
            outputs=[
                pb.ModelInferResponse.InferOutputTensor(name=n, datatype=types[n], shape=outputs[n].shape)
                for n in wanted
            ],
            raw_output_contents=[outputs[n].tobytes() for n in wanted],
        )
        got = grpc_answer(job)
        assert got == expected.SerializeToString()
        assert pb.ModelInferResponse.FromString(got) == expected
        assert grpc_stream_answer(got) == pb.ModelStreamInferResponse(infer_response=expected).SerializeToString()
