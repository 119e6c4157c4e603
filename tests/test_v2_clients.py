"""serve's Open Inference Protocol driven by clients nobody here wrote: Triton's own Python clients (`tritonclient`'s
`http`, `http.aio`, `grpc`, `grpc.aio`, streams included; JSON and binary tensors) on the example policies of every
kind the issue lists, each answer row checked against onnxruntime on the example's ML-Agents ONNX (within 1e-5,
discrete actions equal) and `policy.act(..., deterministic=False, seed=s)`; an LSTM's 8 interleaved sequences of 20
steps equal to the local rollout; and Triton's load generator `perf_analyzer` (the binary shipped in the
tritonclient==2.41.0 wheel) at concurrency 1 and 64 over HTTP and gRPC on the bundled Huggy sample, ending without
errors.

Marked `v2clients`, deselected by default (pytest.ini): CI's V2 clients leg installs `tritonclient[all]==2.41.0`,
`nvidia-cuda-runtime-cu12` (perf_analyzer's libcudart.so.12) and Debian's `libb64-0d`, then runs
`python -m pytest -q -m v2clients`. Outside CI a missing piece skips; in CI it fails."""

import asyncio
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import queue
import re
import select
import subprocess
import sys
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from api_standins import observation
from conftest import BUNDLED, EXAMPLES, ROOT, child_env

import inference as I

pytestmark = pytest.mark.v2clients

IN_CI = bool(os.environ.get("CI"))
CLIENTS = ["http", "http.aio", "grpc", "grpc.aio"]
KINDS = ["vector", "discrete-multi", "hybrid", "lstm", "attention", "visual-simple"]
CHANNEL = [("grpc.enable_http_proxy", 0)]


def need(what: str, why: str):
    """A module the leg installs: imported, else a skip (a failure in CI, where the leg installs it)."""
    try:
        return importlib.import_module(what)
    except ImportError as exc:
        if IN_CI:
            raise
        pytest.skip(f"{what} is not installed ({why}): {exc}")


@pytest.fixture(scope="module")
def v2():
    """The V2 tests' reference and checks (tests/v2_reference.py) and the clients' modules."""
    need("aiohttp", "serve --http")
    need("grpc", "serve --grpc")
    need("geventhttpclient", 'pip install "tritonclient[all]==2.41.0"')
    import v2_reference

    return SimpleNamespace(
        h=v2_reference,
        utils=need("tritonclient.utils", "tritonclient"),
        **{name.replace(".", "_"): need(f"tritonclient.{name}", "tritonclient[all]") for name in CLIENTS},
    )


@pytest.fixture(scope="module")
def servers(v2):
    from mlagents_inference.fronts.serve import serving
    from mlagents_inference.services.batcher import ServeOptions

    stack, made = contextlib.ExitStack(), {}

    def get(kind: str):
        if kind not in made:
            policy = I.load(EXAMPLES / kind)
            said = stack.enter_context(serving(policy, ServeOptions(), http="127.0.0.1:0", grpc="127.0.0.1:0"))
            made[kind] = SimpleNamespace(
                kind=kind,
                policy=policy,
                name=policy.info["behavior"],
                http=said["http"],
                grpc=said["grpc"],
                ref=v2.h.Reference(kind),
                shapes=v2.h.shapes_of(kind),
                branches=json.loads((EXAMPLES / kind / "generated.json").read_text())["discrete_branches"],
            )
        return made[kind]

    with stack:
        yield get


# -- one way to call every client: a list of requests sent together, their answers (name -> array) in order
def request(tensors: list, outputs=None, seed=None, sequence=None, binary=True, ident="") -> dict:
    """tensors: [(name, datatype, array)]; sequence: (id, start, end) or None."""
    return {"tensors": tensors, "outputs": outputs, "seed": seed, "sequence": sequence, "binary": binary, "id": ident}


def _inputs(mod, req: dict, http: bool) -> tuple:
    inputs = []
    for name, datatype, array in req["tensors"]:
        tensor = mod.InferInput(name, list(array.shape), datatype)
        if http:
            tensor.set_data_from_numpy(array, binary_data=req["binary"])
        else:
            tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    outputs = None
    if req["outputs"] is not None:
        outputs = [
            mod.InferRequestedOutput(n, binary_data=req["binary"]) if http else mod.InferRequestedOutput(n)
            for n in req["outputs"]
        ]
    return inputs, outputs


def _kwargs(model: str, req: dict, mod, http: bool) -> dict:
    inputs, outputs = _inputs(mod, req, http)
    seq_id, start, end = req["sequence"] or (0, False, False)
    kwargs = dict(model_name=model, inputs=inputs, outputs=outputs, request_id=req["id"])
    kwargs.update(sequence_id=seq_id, sequence_start=start, sequence_end=end)
    if req["seed"] is not None:
        kwargs["parameters"] = {"seed": req["seed"]}
    return kwargs


def _arrays(result, req: dict, names: list) -> dict:
    return {name: result.as_numpy(name) for name in (req["outputs"] or names)}


def send(v2, client: str, srv, requests: list) -> list:
    """The requests sent together through `client` ("http", "http.aio", "grpc", "grpc.aio", "grpc.stream",
    "grpc.aio.stream"), their answers in order (name -> array), or the exception a refused one raised."""
    names = [n for n, _, _ in v2.h.outputs_of(srv)]
    if client == "http":
        c = v2.http.InferenceServerClient(srv.http, concurrency=max(1, len(requests)))
        try:
            pending = [c.async_infer(**_kwargs(srv.name, r, v2.http, True)) for r in requests]
            return [_result_or_error(v2, lambda p=p: p.get_result(), r, names) for p, r in zip(pending, requests)]
        finally:
            c.close()
            pending = c = None
            gc.collect()  # (its __del__ closes it again: here, in the gevent hub's thread, not in another's collection)
    if client == "grpc":
        c = v2.grpc.InferenceServerClient(srv.grpc, channel_args=CHANNEL)
        try:
            done: dict = {}
            for n, r in enumerate(requests):
                c.async_infer(
                    callback=lambda result, error, n=n: done.__setitem__(n, (result, error)),
                    **_kwargs(srv.name, r, v2.grpc, False),
                )
            deadline = time.monotonic() + 120
            while len(done) < len(requests) and time.monotonic() < deadline:
                time.sleep(0.002)
            return [_pair(done[n], r, names) for n, r in enumerate(requests)]
        finally:
            c.close()
    if client == "grpc.stream":
        c, answers = v2.grpc.InferenceServerClient(srv.grpc, channel_args=CHANNEL), queue.Queue()
        try:
            c.start_stream(callback=lambda result, error: answers.put((result, error)))
            for r in requests:
                c.async_stream_infer(**_kwargs(srv.name, r, v2.grpc, False))
            return [_pair(answers.get(timeout=120), r, names) for r in requests]
        finally:
            c.stop_stream()
            c.close()
    return asyncio.run(_send_aio(v2, client, srv, requests, names))


async def _send_aio(v2, client: str, srv, requests: list, names: list) -> list:
    if client == "http.aio":
        c = v2.http_aio.InferenceServerClient(srv.http)
        mod, http = v2.http_aio, True
    else:
        c = v2.grpc_aio.InferenceServerClient(srv.grpc, channel_args=CHANNEL)
        mod, http = v2.grpc_aio, False
    try:
        if client == "grpc.aio.stream":

            async def iterate():
                for r in requests:
                    yield _kwargs(srv.name, r, mod, False)

            got = []
            async for result, error in c.stream_infer(iterate(), stream_timeout=120):
                got.append((result, error))
                if len(got) == len(requests):
                    break
            return [_pair(pair, r, names) for pair, r in zip(got, requests)]

        async def one(r):
            try:
                return _arrays(await c.infer(**_kwargs(srv.name, r, mod, http)), r, names)
            except v2.utils.InferenceServerException as exc:
                return exc

        return list(await asyncio.gather(*(one(r) for r in requests)))
    finally:
        await c.close()


def _result_or_error(v2, get, req, names):
    try:
        return _arrays(get(), req, names)
    except v2.utils.InferenceServerException as exc:
        return exc


def _pair(pair, req, names):
    result, error = pair
    return error if error is not None else _arrays(result, req, names)


# ====================================================================================================================
FORMATS = [(c, b) for c in CLIENTS for b in ((True, False) if c.startswith("http") else (True,))]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("client, binary", FORMATS, ids=[f"{c}-{'binary' if b else 'json'}" for c, b in FORMATS])
def test_every_row_equals_onnxruntime_and_seeded_act(v2, servers, client, binary, kind):
    srv, rng = servers(kind), np.random.RandomState(zlib.crc32(f"{client}-{binary}-{kind}".encode()))
    sent = []
    for rows, seed in ((1, 5), (4, 6), (9, 2**40 + 3), (16, 0)):
        obs, masks = v2.h.make_inputs(srv, rng, rows)
        memory = None
        if kind == "lstm":
            memory = rng.randn(rows, 1, srv.policy.settings.memory_size).astype(np.float32)
        tensors = v2.h.obs_tensors(obs, masks, memory)
        sent.append(((obs, masks, seed, memory), request(tensors, seed=seed, binary=binary, ident=f"r{rows}")))
    if kind == "visual-simple":  # pixels: UINT8, read as x/255
        pixels = rng.randint(0, 256, (3, 3, 36, 36)).astype(np.uint8)
        vec = observation(rng, (5,), 3)
        sent.append(
            (
                ([pixels.astype(np.float32) / 255, vec], None, None, None),
                request([("obs_0", "UINT8", pixels), ("obs_1", "FP32", vec)], binary=binary),
            )
        )
    outputs = [n for n, _, _ in v2.h.outputs_of(srv)]
    pick = outputs[-1:]  # one output asked for by name
    obs, masks = v2.h.make_inputs(srv, rng, 3)
    sent.append(((obs, masks, None, None), request(v2.h.obs_tensors(obs, masks), outputs=pick, binary=binary)))
    answers = send(v2, client, srv, [r for _, r in sent])
    for ((obs, masks, seed, memory), req), got in zip(sent, answers):
        assert isinstance(got, dict), got
        assert sorted(got) == sorted(req["outputs"] or outputs)
        for name, array in got.items():
            assert array.shape[0] == len(obs[0]), (name, array.shape)
        v2.h.check_against_reference(kind, srv.ref, srv.policy, got, obs, masks, seed, memory)
        if masks is not None:
            for name in ("deterministic_discrete_actions", "discrete_actions"):
                if name in got:
                    v2.h.assert_never_masked(got[name], masks, srv.branches)


@pytest.mark.parametrize("client", [*CLIENTS, "grpc.stream", "grpc.aio.stream"])
def test_lstm_8_interleaved_sequences_of_20_steps_equal_the_local_rollout(v2, servers, client):
    """Each step of the 8 sequences sent together (int and string sequence ids; a stream: all 160 requests at once,
    several of one sequence in flight), every row equal to policy.act with the memory carried from zeros (the
    deterministic and the seeded sampled actions, the memory) and to onnxruntime's rollout of the ML-Agents ONNX."""
    srv, rng = servers("lstm"), np.random.RandomState(7)
    policy, size, steps = srv.policy, srv.policy.settings.memory_size, 20
    ids = [11, 12, 13, 14, f"{client}-a", f"{client}-b", f"{client}-c", f"{client}-d"]
    data = {s: ([observation(rng, (10,), 1) for _ in range(steps)], v2.h.random_masks(rng, steps, [4])) for s in ids}
    memory = {s: np.zeros((1, size), np.float32) for s in ids}
    ref_memory = {s: np.zeros((1, 1, size), np.float32) for s in ids}
    plan, want = [], []
    for t in range(steps):
        for k, s in enumerate(ids):
            obs, masks = [data[s][0][t]], data[s][1][t : t + 1]
            seed = 1000 * k + t
            local = policy.act(obs, action_masks=masks, memory=memory[s])
            sampled = policy.act(obs, action_masks=masks, memory=memory[s], deterministic=False, seed=seed)
            ref = srv.ref(obs, masks, ref_memory[s])
            memory[s], ref_memory[s] = local["memory"], ref["recurrent_out"]
            plan.append(request(v2.h.obs_tensors(obs, masks), seed=seed, sequence=(s, t == 0, t == steps - 1)))
            want.append((local, sampled, ref, masks))
    if client.endswith("stream"):
        got = send(v2, client, srv, plan)
    else:
        got = []
        for t in range(steps):
            got += send(v2, client, srv, plan[t * len(ids) : (t + 1) * len(ids)])
    assert len(got) == len(plan) == 160
    for n, (answer, (local, sampled, ref, masks)) in enumerate(zip(got, want)):
        assert isinstance(answer, dict), (n, answer)
        np.testing.assert_array_equal(answer["deterministic_discrete_actions"], local["discrete_actions"])
        np.testing.assert_array_equal(answer["deterministic_discrete_actions"], ref["deterministic_discrete_actions"])
        np.testing.assert_array_equal(answer["discrete_actions"], sampled["discrete_actions"])
        np.testing.assert_allclose(answer["recurrent_out"].reshape(1, -1), local["memory"], rtol=0, atol=1e-5)
        np.testing.assert_allclose(answer["recurrent_out"], ref["recurrent_out"], rtol=0, atol=1e-5)
        v2.h.assert_never_masked(answer["deterministic_discrete_actions"], masks, [4])
        v2.h.assert_never_masked(answer["discrete_actions"], masks, [4])
    # every sequence ended: a next request without sequence_start is refused, in one line
    late = send(v2, client, srv, [request(plan[0]["tensors"], sequence=(ids[0], False, False))])[0]
    assert isinstance(late, v2.utils.InferenceServerException) and "not started" in late.message()
    assert "\n" not in late.message()


@pytest.mark.parametrize("client", CLIENTS)
def test_health_metadata_config_statistics_and_errors_through_the_client(v2, servers, client):
    srv = servers("lstm")
    hybrid = servers("hybrid")
    checks = (
        asyncio.run(_about_aio(v2, client, srv, hybrid)) if client.endswith("aio") else _about(v2, client, srv, hybrid)
    )
    meta, config, hconfig, stats, errors = checks
    assert meta["name"] == "Memory" and meta["versions"] == ["1"]
    assert [i["name"] for i in meta["inputs"]] == ["obs_0", "action_masks", "recurrent_in"]
    assert [o["name"] for o in meta["outputs"]] == [
        "deterministic_discrete_actions",
        "discrete_actions",
        "recurrent_out",
    ]
    assert "sequence_batching" in config and "dynamic_batching" not in config
    assert "dynamic_batching" in hconfig and "sequence_batching" not in hconfig
    assert [i["name"] for i in config["input"]] == ["obs_0", "action_masks", "recurrent_in"]
    assert stats["model_stats"][0]["name"] == "Memory"
    for status, message in errors:
        assert status in ("400", "404", "StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND"), (status, message)
        assert message and "\n" not in message, message


def _dict(x):
    if isinstance(x, dict):
        return x
    from google.protobuf import json_format

    return json_format.MessageToDict(x, preserving_proto_field_name=True)


def _bad_requests(v2, mod, http: bool, srv) -> list:
    """(model, kwargs) of refused requests: an unknown model, a wrong shape, a sequence never started."""
    bad_shape = request([("obs_0", "FP32", np.zeros((1, 9), np.float32))])
    good = request([("obs_0", "FP32", np.zeros((1, 10), np.float32))], sequence=("nobody", False, False))
    return [
        _kwargs("Nope", good, mod, http),
        _kwargs(srv.name, bad_shape, mod, http),
        _kwargs(srv.name, good, mod, http),
    ]


def _about(v2, client, srv, hybrid):
    mod = v2.http if client == "http" else v2.grpc
    http = client == "http"
    c = mod.InferenceServerClient(srv.http) if http else mod.InferenceServerClient(srv.grpc, channel_args=CHANNEL)
    h = mod.InferenceServerClient(hybrid.http) if http else mod.InferenceServerClient(hybrid.grpc, channel_args=CHANNEL)
    try:
        assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("Memory")
        assert c.is_model_ready("Memory", "1") and not _quiet(lambda: c.is_model_ready("Nope"))
        server = _dict(c.get_server_metadata())
        assert "sequence" in server["extensions"] and server["version"] == I.__version__
        as_json = {} if http else {"as_json": True}
        meta = _dict(c.get_model_metadata("Memory", **as_json))
        config = _dict(c.get_model_config("Memory", **as_json))
        hconfig = _dict(h.get_model_config("Hybrid", **as_json))
        stats = _dict(c.get_inference_statistics("Memory", **as_json))
        config = config.get("config", config)
        hconfig = hconfig.get("config", hconfig)
        errors = []
        for kwargs in _bad_requests(v2, mod, http, srv):
            try:
                c.infer(**kwargs)
            except v2.utils.InferenceServerException as exc:
                errors.append((str(exc.status()), exc.message()))
            else:
                raise AssertionError(f"{kwargs['model_name']}: answered")
        assert c.is_server_live()
        return meta, config, hconfig, stats, errors
    finally:
        c.close()
        h.close()
        c = h = None
        gc.collect()  # (as in send)


def _quiet(call):
    try:
        return call()
    except Exception:  # noqa: BLE001 - a client that raises for an unknown model says "not ready" its way
        return False


async def _about_aio(v2, client, srv, hybrid):
    http = client == "http.aio"
    mod = v2.http_aio if http else v2.grpc_aio
    c = mod.InferenceServerClient(srv.http) if http else mod.InferenceServerClient(srv.grpc, channel_args=CHANNEL)
    h = mod.InferenceServerClient(hybrid.http) if http else mod.InferenceServerClient(hybrid.grpc, channel_args=CHANNEL)
    try:
        assert await c.is_server_live() and await c.is_server_ready() and await c.is_model_ready("Memory")
        as_json = {} if http else {"as_json": True}
        server = _dict(await c.get_server_metadata(**as_json))
        assert "sequence" in server["extensions"]
        meta = _dict(await c.get_model_metadata("Memory", **as_json))
        config = _dict(await c.get_model_config("Memory", **as_json))
        hconfig = _dict(await h.get_model_config("Hybrid", **as_json))
        stats = _dict(await c.get_inference_statistics("Memory", **as_json))
        config = config.get("config", config)
        hconfig = hconfig.get("config", hconfig)
        errors = []
        for kwargs in _bad_requests(v2, mod, http, srv):
            try:
                await c.infer(**kwargs)
            except v2.utils.InferenceServerException as exc:
                errors.append((str(exc.status()), exc.message()))
            else:
                raise AssertionError(f"{kwargs['model_name']}: answered")
        assert await c.is_server_live()
        return meta, config, hconfig, stats, errors
    finally:
        await c.close()
        await h.close()


# -- perf_analyzer
def perf_analyzer() -> tuple:
    """(the perf_analyzer of the installed tritonclient wheel, its environment: LD_LIBRARY_PATH with the
    libcudart.so.12 of nvidia-cuda-runtime-cu12). $PERF_ANALYZER (as tools/v2_tools.sh prints it, with its
    LD_LIBRARY_PATH) names another."""
    path = Path(os.environ.get("PERF_ANALYZER") or Path(sys.executable).parent / "perf_analyzer")
    spec = importlib.util.find_spec("nvidia.cuda_runtime") if importlib.util.find_spec("nvidia") else None
    missing = []
    if not path.exists():
        missing.append(f'{path} (pip install "tritonclient[all]==2.41.0")')
    if spec is None and not os.environ.get("PERF_ANALYZER"):
        missing.append("nvidia.cuda_runtime (pip install nvidia-cuda-runtime-cu12)")
    if missing:
        if IN_CI:
            raise AssertionError("missing: " + "; ".join(missing))
        pytest.skip("missing: " + "; ".join(missing))
    lib = str(Path(next(iter(spec.submodule_search_locations))) / "lib") if spec is not None else None
    env = child_env(LD_LIBRARY_PATH=os.pathsep.join(p for p in (lib, os.environ.get("LD_LIBRARY_PATH")) if p))
    return str(path), env


@contextlib.contextmanager
def cli_server(model: Path):
    """`python inference.py --mode serve --model-dir MODEL --http 127.0.0.1:0 --grpc 127.0.0.1:0`, its addresses read
    from its start-up lines ([serve] http on HOST:PORT, [serve] grpc on HOST:PORT)."""
    args = [sys.executable, str(ROOT / "inference.py"), "--mode", "serve", "--model-dir", str(model)]
    args += ["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]
    proc = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env()
    )
    said, text, deadline = {}, b"", time.monotonic() + 120
    try:
        while not {"http", "grpc"} <= set(said):
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, (proc.poll(), text)
            if select.select([proc.stderr], [], [], left)[0]:
                text += os.read(proc.stderr.fileno(), 4096)
            said = {k.decode(): v.decode() for k, v in re.findall(rb"\[serve\] (http|grpc) on (\S+)\n", text)}
        yield proc, said
    finally:
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: serve's normal end, exit 0
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.said = (text + proc.stderr.read()).decode(errors="replace")
        proc.stderr.close()
        proc.stdout.close()


ERRORS = re.compile(r"error|fail|unable|exception|abort", re.I)


def run_perf(binary: str, env: dict, model: str, url: str, protocol: str, concurrency: int, *extra) -> str:
    """One perf_analyzer run, short windows: its output, after asserting exit 0 and no error in it. The stability
    rule is loosened (-s 10000): what is asked is that every request is answered without error, not a stable
    figure on a shared CI machine."""
    args = [binary, "-m", model, "-u", url, "-i", protocol, "--concurrency-range", str(concurrency)]
    args += ["--measurement-interval", "1000", "--max-trials", "3", "-s", "10000", *extra]
    r = subprocess.run(args, capture_output=True, text=True, timeout=240, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(args[1:])}: exit {r.returncode}\n{out[-4000:]}"
    assert not ERRORS.search(out), f"{' '.join(args[1:])}:\n{out[-4000:]}"
    assert f"Concurrency: {concurrency}, throughput:" in out, out[-2000:]
    counts = re.search(
        r"Server:\s*\n\s*Inference count: (\d+)\s*\n\s*Execution count: (\d+)\s*\n\s*Successful request count: (\d+)",
        out,
    )
    assert counts and int(counts.group(3)) > 0, out[-2000:]
    return out


def test_perf_analyzer_at_concurrency_1_and_64_over_http_and_grpc_ends_without_errors():
    binary, env = perf_analyzer()
    with cli_server(BUNDLED) as (proc, said):
        runs = []
        for protocol in ("http", "grpc"):
            for concurrency in (1, 64):
                runs.append(run_perf(binary, env, "Huggy", said[protocol], protocol, concurrency))
        # the other ways it sends: JSON tensors over HTTP, one gRPC stream, asynchronous requests (over gRPC: 2.41's
        # asynchronous HTTP client reads each finished request's CURLMsg after curl_multi_remove_handle and
        # curl_easy_cleanup have freed it, and prints "Unexpected error: received CURLMsg=<garbage>" for answers
        # that came back whole)
        run_perf(
            binary,
            env,
            "Huggy",
            said["http"],
            "http",
            64,
            "--input-tensor-format",
            "json",
            "--output-tensor-format",
            "json",
        )
        run_perf(binary, env, "Huggy", said["grpc"], "grpc", 64, "--streaming")
        run_perf(binary, env, "Huggy", said["grpc"], "grpc", 16, "--async")
        assert proc.poll() is None
        stats = json.loads(_get(said["http"], "/v2/models/Huggy/stats"))["model_stats"][0]
        assert stats["inference_stats"]["fail"]["count"] == 0
        assert stats["inference_stats"]["success"]["count"] > 1000 and stats["execution_count"] > 0
    assert proc.returncode == 0 and "Traceback" not in proc.said, proc.said[-3000:]


def test_perf_analyzer_drives_the_lstm_as_a_sequence_model(tmp_path):
    """The LSTM's configuration has sequence_batching: perf_analyzer sends sequences (sequence_id, start, end) the
    server keeps the memory of. Its masks must be 0 or 1 (random ones are refused, as they should be): the input
    data is given (a JSON file of 3 streams of 20 steps, floats written as floats)."""
    binary, env = perf_analyzer()
    rng = np.random.RandomState(0)
    streams = [
        [
            {"obs_0": [float(x) for x in rng.randn(10)], "action_masks": [1.0, 1.0, 0.0, 1.0] if t % 2 else [1.0] * 4}
            for t in range(20)
        ]
        for _ in range(3)
    ]
    data = tmp_path / "lstm.json"
    data.write_text(json.dumps({"data": streams}))
    with cli_server(EXAMPLES / "lstm") as (proc, said):
        for protocol in ("http", "grpc"):
            out = run_perf(binary, env, "Memory", said[protocol], protocol, 8, "--input-data", str(data))
            assert re.search(r"Sequence count: [1-9]", out), out[-2000:]
        stats = json.loads(_get(said["http"], "/v2/models/Memory/stats"))["model_stats"][0]
        assert stats["inference_stats"]["fail"]["count"] == 0 and stats["inference_stats"]["success"]["count"] > 100


def test_perf_analyzer_on_two_behaviours_of_one_run_folder_at_once_ends_without_errors(tmp_path):
    """serve on a run folder of two behaviours (Vector, Hybrid); two perf_analyzers started together over gRPC, one
    on each model at concurrency 64: both end without errors and each model's statistics count its own requests,
    none failed. (How their summed throughput compares with each alone: tools/bench_follow.py --case two.)"""
    import concurrent.futures

    from conftest import two_behaviour_run

    binary, env = perf_analyzer()
    rng = np.random.RandomState(0)
    hybrid = tmp_path / "hybrid.json"  # (its masks 0 or 1, one branch of 2: perf_analyzer's random ones are refused)
    steps = [{"obs_0": [float(x) for x in rng.randn(12)], "action_masks": [1.0, float(t % 2)]} for t in range(16)]
    hybrid.write_text(json.dumps({"data": [steps]}))
    run = two_behaviour_run(tmp_path)
    with cli_server(run) as (proc, said):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = [
                pool.submit(run_perf, binary, env, "Vector", said["grpc"], "grpc", 64),
                pool.submit(run_perf, binary, env, "Hybrid", said["grpc"], "grpc", 64, "--input-data", str(hybrid)),
            ]
            for done in runs:
                done.result()  # (each: exit 0, no error, requests answered)
        stats = {
            model: json.loads(_get(said["http"], f"/v2/models/{model}/stats"))["model_stats"][0]
            for model in ("Vector", "Hybrid")
        }
    for model, row in stats.items():
        assert (row["name"], row["version"]) == (model, {"Vector": "100000", "Hybrid": "40000"}[model])
        assert row["inference_stats"]["fail"]["count"] == 0 and row["inference_stats"]["success"]["count"] > 100
    assert proc.returncode == 0 and "Traceback" not in proc.said, proc.said[-3000:]


def _get(where: str, path: str) -> bytes:
    import http.client

    conn = http.client.HTTPConnection(where, timeout=60)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        assert r.status == 200
        return r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("client", ["http", "grpc"])
def test_tritonclient_repository_index_load_and_unload_on_two_behaviours(v2, client, tmp_path):
    """tritonclient's get_model_repository_index, unload_model and load_model on a run folder of two behaviours
    (serve with --allow-model-control): the index lists both, an unloaded model is UNAVAILABLE and its inference
    refused, loaded again it answers as load(<its checkpoint>).act() within 1e-5."""
    from conftest import two_behaviour_run

    from mlagents_inference.fronts.serve import serving
    from mlagents_inference.services.batcher import ServeOptions
    from mlagents_inference.services.repository import Repository

    mod = getattr(v2, client)
    run = two_behaviour_run(tmp_path)
    repo = Repository([run])
    repo.poll()
    obs = np.random.RandomState(2).uniform(-1, 1, (3, 12)).astype(np.float32)
    want = I.load(run / "Hybrid" / "Hybrid-40000.pt").act(obs)

    def index(c) -> set:
        got = c.get_model_repository_index()
        rows = got if client == "http" else json.loads(json.dumps(_dict_index(got)))
        return {(r["name"], r.get("version", ""), r["state"]) for r in rows}

    def infer(c):
        tensor = mod.InferInput("obs_0", list(obs.shape), "FP32")
        tensor.set_data_from_numpy(obs)
        return c.infer("Hybrid", [tensor])

    with serving(None, ServeOptions(allow_model_control=True), repo, http="127.0.0.1:0", grpc="127.0.0.1:0") as said:
        c = mod.InferenceServerClient(said[client])
        before = index(c)
        c.unload_model("Hybrid")
        unloaded = index(c)
        with pytest.raises(v2.utils.InferenceServerException) as refused:
            infer(c)
        c.load_model("Hybrid")
        ready = c.is_model_ready("Hybrid")
        result = infer(c)
        c.close()
    assert before == {("Hybrid", "40000", "READY"), ("Vector", "100000", "READY")}
    assert ("Hybrid", "", "UNAVAILABLE") in unloaded and ("Vector", "100000", "READY") in unloaded
    assert "Hybrid" in refused.value.message() and "\n" not in refused.value.message()
    assert ready
    got = result.as_numpy("deterministic_continuous_actions")
    assert np.abs(got - want["continuous_actions"]).max() <= 1e-5
    assert (result.as_numpy("deterministic_discrete_actions") == want["discrete_actions"]).all()
    response = result.get_response()
    assert (response["model_version"] if client == "http" else response.model_version) == "40000"


def _dict_index(message) -> list:
    """A gRPC RepositoryIndexResponse as the REST index's rows."""
    return [{"name": m.name, "version": m.version, "state": m.state, "reason": m.reason} for m in message.models]
