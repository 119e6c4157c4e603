"""serve --ray: Ray Serve replicas behind the command's own HTTP ingress, on a real local Ray instance and on a real
two-node cluster on this machine (head and worker on 127.0.0.1, one CPU each), as tests/test_ray.py builds it. No mocks.
Every POST /v1/act answer must be, byte for byte, the line `--mode stream` writes for the same line: bad lines' errors
too, and an LSTM's next memory when the line carries its memory (replicas share none); a request of many lines is one
connection's. The V2 routes answer what inference.load(...).act(...) gives; /healthz and /metrics (every replica's
counts); serve's bounds (a request's body and lines, the bytes in flight, a request's LSTM memories) and one-line
errors, a replica killed mid-request included.

In the Ray group (`-m ray`): it needs requirements-ray.txt (Ray Serve), and each Ray start takes tens of seconds."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, add_hybrid, child_env, cli, copy_run, two_behaviour_run, write_checkpoint

pytestmark = pytest.mark.ray
pytest.importorskip("ray.serve", reason="serve --ray needs Ray Serve: pip install -r requirements-ray.txt")
from ray_cluster import cluster_env, family, free_port, gone  # noqa: E402

LIMIT = 4096  # --max-line-bytes on both sides: a longer line is answered with an error
REQUEST_BYTES, REQUEST_LINES, IN_FLIGHT_BYTES = 16 << 20, 16_384, 64 << 20  # (fronts/ray_serve.py's bounds)


def local_replica(folder: Path):
    """A Ray Serve replica's class built in this process (no Ray) on the example run folder: its own answering."""
    from mlagents_inference.services.ray_replica import PolicyReplica

    model = {
        "checkpoint": str(next(folder.rglob("*.pt"))),
        "onnx": None,
        "model_dir": str(folder),
        "behavior": None,
        "expect_sha256": None,
        "goal_input": None,
        "device": "cpu",
        "dtype": "float32",
        "engine": "onnxruntime",
        "graphs": True,
        "providers": None,
        "spin": False,
        "compile": False,
        "threads": None,
    }
    return PolicyReplica(model, LIMIT, 256, 0.0)


class Server:
    """`inference.py --mode serve --ray ...` in the background, once it says it listens; stdout and stderr go to files
    (a pipe nobody reads could fill and stop it)."""

    def __init__(self, folder: Path, *args, env=None, within: float = 300):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/act"
        self.out, self.err = folder / "serve.out", folder / "serve.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "inference.py"),
                    "--mode",
                    "serve",
                    *map(str, args),
                    "--http",
                    f"127.0.0.1:{self.port}",
                    "--max-line-bytes",
                    str(LIMIT),
                ],
                stdout=out,
                stderr=err,
                env=env or child_env(),
            )
        deadline = time.time() + within
        while "listening" not in self.err.read_text():
            assert self.proc.poll() is None and time.time() < deadline, self.err.read_text()
            time.sleep(0.2)
        self.base = self.url[: -len("/v1/act")]

    def call(self, path: str, body: Optional[bytes] = None, headers=None, timeout: float = 120) -> tuple:
        """(status, headers, body) of a GET (no body) or POST, whatever the status."""
        request = urllib.request.Request(
            self.base + path, data=body, method="GET" if body is None else "POST", headers=headers or {}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as answer:
            return answer.code, answer.headers, answer.read()

    def one_line_error(self, path: str, body: Optional[bytes] = None, headers=None) -> tuple:
        """(status, error text) of a request that must be refused with one JSON line {"error": ...}."""
        status, heads, text = self.call(path, body, headers)
        assert status >= 400 and heads["Content-Type"].startswith("application/json"), (status, text[:200])
        assert text.count(b"\n") <= 1 and b"Traceback" not in text, text[:300]
        return status, json.loads(text)["error"]

    def log_is_one_liners(self) -> None:
        """Everything the server said on stderr is serve's own one-line notes: no traceback, no Ray chatter."""
        text = self.err.read_text()
        assert "Traceback" not in text and all(line.startswith("[serve] ") for line in text.splitlines()), text[-3000:]

    def post(self, body: bytes, timeout: float = 60) -> str:
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                assert answer.status == 200 and answer.headers["Content-Type"] == "application/json"
                text = answer.read().decode()
                assert "error" not in json.loads(text)
                return text
        except urllib.error.HTTPError as answer:  # an error answer: 400, as serve's --http
            assert answer.code == 400 and answer.headers["Content-Type"] == "application/json", answer.code
            text = answer.read().decode()
            assert "error" in json.loads(text)
            return text

    def post_all(self, lines: list, workers: int = 16) -> list:
        """Every line POSTed at once (the replicas' batches gather them), the answers in order."""
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda line: self.post(line.encode()), lines))

    def stop(self, sig=signal.SIGTERM, within: float = 90) -> tuple:
        """(exit code, seconds to end, whether every Ray process below it ended)."""
        below = family(self.proc.pid)
        t0 = time.time()
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=30)
        return code, time.time() - t0, gone(below, within=30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            for pid in family(self.proc.pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait(timeout=30)


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def stream(model: Path, lines: list) -> list:
    result = cli("--mode", "stream", "--model-dir", model, "--max-line-bytes", LIMIT, input="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def vector_lines() -> list:
    rng = np.random.RandomState(4)
    obs = lambda: [round(float(v), 6) for v in rng.randn(8) * 2]  # noqa: E731
    lines = [json.dumps({"id": i, "obs": obs()}) for i in range(40)]
    lines += [
        json.dumps({"id": "rows", "obs": [obs(), obs(), obs()]}),
        json.dumps({"id": "noise", "obs": obs(), "stochastic": True, "seed": 7}),
        json.dumps({"obs": obs()}),
        "not json",
        json.dumps({"id": "short", "obs": [1.0, 2.0]}),
        json.dumps({"id": 5, "obs": obs(), "x": 1}),
        '{"id": "nan", "obs": [NaN, 0, 0, 0, 0, 0, 0, 0]}',
        json.dumps({"id": "long", "obs": [0.5] * 2000}),
        json.dumps({"id": "big", "obs": [3e38] * 8}),
        "[]",
    ]
    return lines


@pytest.fixture(scope="module")
def vector_server(tmp_path_factory):
    server = Server(
        tmp_path_factory.mktemp("serve"), "--ray", "local", "--replicas", "1", "--model-dir", EXAMPLES / "vector"
    )
    try:
        yield server
    finally:
        server.kill()


def test_local_ray_answers_are_the_streams(vector_server):
    lines = vector_lines()
    expected = stream(EXAMPLES / "vector", lines)
    assert len(expected) == len(lines) and sum('"error"' in e for e in expected) >= 7
    assert [vector_server.post(line.encode()) for line in lines] == expected  # one at a time
    assert vector_server.post_all(lines * 3) == expected * 3  # together: the replica's batches
    assert vector_server.post((lines[0] + "\n").encode()) == expected[0]  # a line's newline is no part of it


def test_local_ray_refuses_other_paths_and_methods(vector_server):
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(vector_server.url, timeout=30)
    assert caught.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(
            urllib.request.Request(vector_server.url + "/more", data=b"{}", method="POST"), timeout=30
        )
    assert caught.value.code == 404


def lines_body(lines: list) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def test_a_request_of_many_lines_is_answered_as_a_connection(vector_server):
    """A body of several lines: their answers, in order, one a line (the stream's, bad lines' errors too), status 200;
    blank lines are no lines; an empty body is one error line."""
    lines = vector_lines()
    expected = stream(EXAMPLES / "vector", lines)
    status, heads, text = vector_server.call("/v1/act", lines_body(lines) + b"\n  \n")
    assert status == 200 and heads["Content-Type"].startswith("application/x-ndjson")
    assert text.decode().splitlines() == expected and text.endswith(b"\n")
    assert vector_server.one_line_error("/v1/act", b"\n\n") == (400, "empty body: expected stream lines")


def test_a_request_past_its_bounds_is_one_line(vector_server):
    """serve's bounds on a request: its body (16 MiB, or --max-line-bytes where more), its lines (16,384): 413 in one
    JSON line; a line past --max-line-bytes inside a body gets the stream's error in its place."""
    status, error = vector_server.one_line_error("/v1/act", b"x" * (REQUEST_BYTES + 1))
    assert status == 413 and error == f"the request body is longer than {REQUEST_BYTES} bytes"
    status, error = vector_server.one_line_error("/v1/act", b"{}\n" * (REQUEST_LINES + 1))
    assert status == 413 and error == f"more than {REQUEST_LINES} lines in one request: send them in several"
    status, _, text = vector_server.call("/v1/act", b"{}\n" * REQUEST_LINES)  # (at the bound: answered)
    assert status == 200 and text.count(b"\n") == REQUEST_LINES
    long = json.dumps({"id": "long", "obs": [0.5] * 2000})
    short = json.dumps({"id": 1, "obs": [0.5] * 8})
    status, _, text = vector_server.call("/v1/act", lines_body([long, short]))
    assert status == 200 and text.decode().splitlines() == stream(EXAMPLES / "vector", [long, short])
    vector_server.log_is_one_liners()


def test_bodies_in_flight_are_bounded(vector_server):
    """Requests whose bodies are still coming hold their Content-Length: past 64 MiB together a request is refused at
    once (503, one JSON line), nothing read; once they are gone, the next is answered."""
    host, port = vector_server.base.rsplit("/", 1)[-1].rsplit(":", 1)
    said = vector_server.err.read_text()
    held = []
    try:
        for _ in range(IN_FLIGHT_BYTES // REQUEST_BYTES):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(
                f"POST /v1/act HTTP/1.1\r\nHost: x\r\nContent-Length: {REQUEST_BYTES}\r\n\r\n".encode() + b"{" * 1000
            )
            held.append(sock)
        time.sleep(1.0)  # (the ingress has taken them)
        line = json.dumps({"id": 1, "obs": [0.5] * 8}).encode()
        status, error = vector_server.one_line_error("/v1/act", line)
        assert status == 503 and error.startswith("busy: 4 requests in flight"), error
    finally:
        for sock in held:
            sock.close()
    deadline = time.time() + 30
    while vector_server.call("/v1/act", line)[0] != 200:
        assert time.time() < deadline
        time.sleep(0.2)
    assert vector_server.err.read_text() == said  # (clients that went away: nothing to tell)


async def head_of(address, head: bytes, body: bytes) -> tuple:
    """A POST's `head` and the first `body` bytes of its body sent, no more: (its answer, the seconds it took)."""
    import asyncio

    reader, writer = await asyncio.open_connection(*address)
    writer.write(head + body)
    await writer.drain()
    started = time.monotonic()
    try:
        got = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 15)
        took = time.monotonic() - started
        length = int(re.search(rb"(?i)content-length: (\d+)", got).group(1))
        return got + await asyncio.wait_for(reader.readexactly(length), 15), took
    finally:
        writer.close()


def ingress_answers(posts: list, **settings) -> list:
    """The ingress in this process (on a replica's own description; no request of these reaches a replica), its
    `settings` (body_s, in_flight_bytes: the options') set: the answer to each of `posts` (path, Content-Length,
    bytes sent), sent one after the other, each left open: (status, headers, body, seconds)."""
    import asyncio

    from aiohttp import web

    from mlagents_inference.fronts.ray_serve import Ingress
    from mlagents_inference.services.protocol import json_codec

    described = local_replica(EXAMPLES / "vector").describe()
    loads, dumps = json_codec()

    async def main() -> list:
        ingress = Ingress(None, described, LIMIT, 8, dumps, loads=loads)
        for key, value in settings.items():
            setattr(ingress, key, value)
        app = web.Application(client_max_size=ingress.body_bytes)
        app.add_routes(ingress.routes(web))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            await web.SockSite(runner, sock).start()
            try:
                tasks = []
                for path, length, sent in posts:
                    path = path.replace("{name}", described["name"])
                    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()
                    tasks.append(asyncio.ensure_future(head_of(sock.getsockname(), head, b"{" * sent)))
                    await asyncio.sleep(0.3)  # (each taken before the next)
                return await asyncio.gather(*tasks)
            finally:
                await runner.cleanup()

    answers = []
    for data, took in asyncio.run(main()):
        head, body = data.split(b"\r\n\r\n", 1)
        answers.append((int(head.split()[1]), head.decode().lower(), body, took))
    return answers


PATHS = ["/v1/act", "/v2/models/{name}/infer"]


def test_a_body_that_stops_coming_is_answered_408_in_its_time():
    """The ingress read a body for as long as its client liked (4 clients stalled mid-body held the 64 MiB of bodies
    in flight: every other request 503, for ever; --body-timeout-s was taken and not used). Now a body has
    --body-timeout-s to arrive, 1 s here, then 408 in one line and the connection closed, on /v1/act and V2."""
    for status, head, body, took in ingress_answers([(path, 1000, 500) for path in PATHS], body_s=1.0):
        assert status == 408 and b"--body-timeout-s" in body and b"\n" not in body, (status, body)
        assert "\r\nconnection: close" in head and set(json.loads(body)) == {"id", "error"}, (head, body)
        assert took < 10, took  # (within its 1 s and the loop's turns)


def test_the_bodies_in_flight_are_bounded_by_http_in_flight_bytes():
    """--http-in-flight-bytes was taken and not used (64 MiB whatever it said). With 1 MiB: a body stalled 900,000
    bytes into its Content-Length holds it, and a request of 500,000 more is refused at once (503, one line)."""
    posts = [(PATHS[0], 900_000, 1000), (PATHS[1], 500_000, 0)]
    first, (status, _, body, took) = ingress_answers(posts, body_s=3.0, in_flight_bytes=1 << 20)
    assert first[0] == 408, first  # (the stalled one, in its time)
    assert status == 503 and b"1,048,576 bytes of bodies" in body and b"\n" not in body, (status, body)
    assert took < 10, took


def v2_request(inputs: dict, binary: bool) -> tuple:
    """(body, headers) of a V2 infer request: JSON data, or the binary extension both ways."""
    tensors, tail = [], b""
    for name, array in inputs.items():
        tensor = {"name": name, "datatype": "FP32", "shape": list(array.shape)}
        if binary:
            raw = array.astype("<f4").tobytes()
            tensor["parameters"] = {"binary_data_size": len(raw)}
            tail += raw
        else:
            tensor["data"] = array.reshape(-1).tolist()
        tensors.append(tensor)
    header = json.dumps({"inputs": tensors, "parameters": {"binary_data_output": binary}}).encode()
    return header + tail, {"Inference-Header-Content-Length": str(len(header))} if binary else {}


def v2_outputs(status: int, heads, body: bytes) -> dict:
    assert status == 200, body[:300]
    length = heads.get("Inference-Header-Content-Length")
    header = json.loads(body[: int(length)] if length else body)
    out, at = {}, int(length or 0)
    for tensor in header["outputs"]:
        dtype = np.float32 if tensor["datatype"] == "FP32" else np.int64
        size = tensor.get("parameters", {}).get("binary_data_size")
        if size is not None:
            out[tensor["name"]] = np.frombuffer(body[at : at + size], dtype).reshape(tensor["shape"])
            at += size
        else:
            out[tensor["name"]] = np.array(tensor["data"], dtype).reshape(tensor["shape"])
    return out


def test_v2_routes_answer_as_the_library(vector_server):
    """The Open Inference Protocol's REST routes as serve --http has them: health, server and model metadata, model
    configuration, readiness, and infer (JSON and binary tensors) answering what inference.load(...).act(...) gives;
    an unknown model 404 and a bad request 400, each one JSON line."""
    import inference

    policy = inference.load(EXAMPLES / "vector")
    server = vector_server
    assert server.call("/v2/health/live")[0] == 200 and server.call("/v2/health/ready")[0] == 200
    status, _, text = server.call("/v2")
    assert status == 200 and json.loads(text)["name"] == "mlagents-inference"
    _, _, text = server.call("/v2/models/stats")
    name = json.loads(text)["model_stats"][0]["name"]
    status, _, text = server.call(f"/v2/models/{name}")
    meta = json.loads(text)
    assert status == 200 and meta["name"] == name and meta["versions"] == ["1"]
    for path in (f"/v2/models/{name}", f"/v2/models/{name}/versions/1"):
        assert server.call(path + "/ready")[0] == 200
        status, _, text = server.call(path + "/config")
        assert status == 200 and json.loads(text)["name"] == name
    rng = np.random.RandomState(3)
    obs = (rng.randn(5, *meta["inputs"][0]["shape"][1:]) * 2).astype(np.float32)
    want = policy.act(obs)
    for binary in (False, True):
        body, headers = v2_request({meta["inputs"][0]["name"]: obs}, binary)
        got = v2_outputs(*server.call(f"/v2/models/{name}/infer", body, headers))
        for key, output in (
            ("continuous_actions", "deterministic_continuous_actions"),
            ("discrete_actions", "deterministic_discrete_actions"),
        ):
            if key in want:
                np.testing.assert_array_equal(got[output], np.asarray(want[key]).reshape(got[output].shape))
    status, _, text = server.call(f"/v2/models/{name}/versions/1/stats")
    stats = json.loads(text)["model_stats"][0]
    assert status == 200 and stats["inference_stats"]["success"]["count"] >= 2 and stats["inference_count"] >= 10
    assert server.one_line_error("/v2/models/nope")[0] == 404
    assert server.one_line_error("/v2/models/nope/infer", b"{}")[0] == 404
    assert server.one_line_error(f"/v2/models/{name}/versions/7/ready")[0] == 404
    off = "the repository API is off: start serve with --allow-model-control to load and unload"  # (serve's 403)
    assert server.one_line_error("/v2/repository/index", b"{}") == (403, off)
    assert server.one_line_error(f"/v2/repository/models/{name}/unload", b"{}") == (403, off)
    assert server.one_line_error(f"/v2/models/{name}/infer")[0] == 405  # (a GET: as serve --http, one JSON line)
    for bad in (b"not json", b"{}", b'{"inputs": [{"name": "nope", "datatype": "FP32", "shape": [1], "data": [1]}]}'):
        assert server.one_line_error(f"/v2/models/{name}/infer", bad)[0] == 400
    server.log_is_one_liners()


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, (name, text[:2000])
    return float(found.group(1))


def test_healthz_and_metrics_count_every_replica(vector_server):
    """GET /healthz: ok. GET /metrics: serve's names, the lines every replica answered (and each replica's)."""
    status, _, text = vector_server.call("/healthz")
    assert (status, text) == (200, b"ok\n")
    before = vector_server.call("/metrics")[2].decode()
    lines = vector_lines()[:12]
    vector_server.call("/v1/act", lines_body(lines))
    vector_server.post_all(lines[:4])
    status, heads, text = vector_server.call("/metrics")
    text = text.decode()
    assert status == 200 and heads["Content-Type"].startswith("text/plain")
    assert metric(text, "mlagents_serve_lines_total") == metric(before, "mlagents_serve_lines_total") + 16
    assert metric(text, "mlagents_serve_replicas_seen") == 1
    per = re.findall(r'^mlagents_serve_replica_lines_total\{replica="[^"]+"\} (\S+)$', text, re.M)
    assert len(per) == 1 and float(per[0]) == metric(text, "mlagents_serve_lines_total")
    assert metric(text, "mlagents_serve_batch_lines_count") >= 2 and "mlagents_serve_latency_seconds_bucket" in text


def test_malformed_requests_are_one_line(vector_server):
    """What a hostile client sends (no HTTP at all, a bad chunked body, a bad Content-Length): refused, and on stderr
    one line at most a second, never a traceback."""
    host, port = vector_server.base.rsplit("/", 1)[-1].rsplit(":", 1)
    for raw in (
        b"GARBAGE\r\n\r\n",
        b"POST /v1/act HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        b"POST /v1/act HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
        b"POST /v2/models/x/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n\xff\xfe\x00",
    ):
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(raw)
            answer = sock.recv(65536)
        assert re.match(rb"HTTP/1\.[01] 4\d\d ", answer), answer[:200]  # (aiohttp's refusal, as serve --http's)
    assert vector_server.call("/healthz")[0] == 200
    vector_server.log_is_one_liners()


def test_a_replica_killed_mid_request_is_one_line(vector_server):
    """The replica's process killed while it answers: the requests it held get a 503 JSON line, stderr one line (no
    500, no traceback); Ray Serve starts another replica and the server answers again."""
    body = b"".join(json.dumps({"id": i, "obs": [0.25] * 8}).encode() + b"\n" for i in range(REQUEST_LINES))
    answers: list = []
    stop = time.time() + 120

    def client() -> None:
        while time.time() < stop and not any(status == 503 for status, _ in answers):
            status, _, text = vector_server.call("/v1/act", body, timeout=180)
            answers.append((status, text))

    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(client) for _ in range(4)]
        time.sleep(3)
        replicas = [p for p, c in family(vector_server.proc.pid).items() if "ServeReplica" in c]
        assert len(replicas) == 1, replicas
        os.kill(replicas[0], signal.SIGKILL)
        for future in running:
            future.result()
    failed = [json.loads(text) for status, text in answers if status != 200]
    assert failed and all(set(a) == {"id", "error"} for a in failed), answers[-1][1][:300]
    assert all(a["error"].startswith("a Ray Serve replica failed on this request") for a in failed), failed
    assert all(status in (200, 503) for status, _ in answers)
    line = json.dumps({"id": 1, "obs": [0.5] * 8}).encode()
    assert vector_server.post(line, timeout=300) == stream(EXAMPLES / "vector", [line.decode()])[0]  # (a new replica)
    vector_server.log_is_one_liners()


def test_local_ray_ends_cleanly_on_sigterm(vector_server):
    code, seconds, all_gone = vector_server.stop()
    assert code == 0 and seconds < 60 and all_gone, (code, seconds)  # SIGTERM: a server's normal end, as serve's
    said = vector_server.err.read_text().splitlines()
    assert said[0] == f"[serve] ray serve listening on {vector_server.url} (1 replica)", said
    vector_server.log_is_one_liners()  # (the refusals and the killed replica above: a line each, at most)
    assert vector_server.out.read_text() == ""


def lstm_rollout(server: Server, agents=("a", "b", "c"), steps=5) -> tuple:
    """Agents stepping together, each line carrying the memory its last answer gave: (lines sent, answers)."""
    rng = np.random.RandomState(9)
    memory: dict = {}
    sent, answers = [], []
    for _ in range(steps):
        lines = [
            json.dumps(
                {
                    "id": a,
                    "obs": [round(float(v), 6) for v in rng.randn(10)],
                    **({"memory": memory[a]} if a in memory else {}),
                }
            )
            for a in agents
        ]
        got = server.post_all(lines)
        for agent, answer in zip(agents, got):
            memory[agent] = json.loads(answer)["memory"]
        sent += lines
        answers += got
    return sent, answers


def check_lstm(server: Server) -> None:
    sent, answers = lstm_rollout(server)
    assert answers == stream(EXAMPLES / "lstm", sent)  # the same lines, memories in them
    without = [json.dumps({k: v for k, v in json.loads(line).items() if k != "memory"}) for line in sent]
    assert answers == stream(EXAMPLES / "lstm", without)  # the stream keeps each id's memory: the same answers
    # on Ray an id keeps no memory: a line without one starts from zeros, as the stream's "reset": true
    later = without[len(without) // 2]
    assert server.post(later.encode()) == stream(EXAMPLES / "lstm", [later[:-1] + ', "reset": true}'])[0]
    bad = [
        json.dumps({"id": "m", "obs": [0.0] * 10, "memory": [1.0] * 3}),
        json.dumps({"id": "m", "obs": [0.0] * 10, "action_masks": [0, 0, 0, 0]}),
    ]
    assert server.post_all(bad) == stream(EXAMPLES / "lstm", bad)


@pytest.fixture(scope="module")
def lstm_server(tmp_path_factory):
    server = Server(
        tmp_path_factory.mktemp("serve"), "--ray", "local", "--replicas", "1", "--model-dir", EXAMPLES / "lstm"
    )
    try:
        yield server
    finally:
        server.kill()


def test_local_ray_lstm_lines_carry_their_memory(lstm_server):
    check_lstm(lstm_server)


def test_a_request_keeps_its_ids_memories_as_a_connection(lstm_server):
    """The lines of one request are one connection's: an id's memory goes from one of its lines to the next (the
    stream's answers for the same lines), and is gone with the request."""
    sent, _ = lstm_rollout(lstm_server)
    without = [json.dumps({k: v for k, v in json.loads(line).items() if k != "memory"}) for line in sent]
    status, _, text = lstm_server.call("/v1/act", lines_body(without))
    assert status == 200 and text.decode().splitlines() == stream(EXAMPLES / "lstm", without)
    again = lstm_server.post(without[-1].encode())  # (a request of its own: from zeros)
    assert again == stream(EXAMPLES / "lstm", [without[-1][:-1] + ', "reset": true}'])[0]


def test_a_request_past_its_memory_bound_is_refused_not_restarted(lstm_server):
    """serve's bound on a connection's memories, on a request: past 10,000 ids its least recently answered id is
    dropped, and that id's next line is refused (one error line in its place) unless it says "reset": true or
    carries its "memory"."""
    obs = [0.1 * k for k in range(10)]
    lines = [json.dumps({"id": i, "obs": obs}) for i in range(10_001)]
    lines += [
        json.dumps({"id": 0, "obs": obs}),
        json.dumps({"id": 1, "obs": obs, "reset": True}),
        json.dumps(
            {"id": 2, "obs": obs, "memory": [0.0] * len(json.loads(lstm_server.post(lines[0].encode()))["memory"])}
        ),
    ]
    status, _, text = lstm_server.call("/v1/act", lines_body(lines))
    answers = [json.loads(a) for a in text.decode().splitlines()]
    assert status == 200 and len(answers) == len(lines)
    assert all("error" not in a for a in answers[:10_001])
    assert (
        answers[-3]["id"] == 0 and "its memory was dropped at this client's bound of 10000 ids" in answers[-3]["error"]
    )
    assert "error" not in answers[-2] and "error" not in answers[-1]


def test_the_replicas_memories_are_bounded_together():
    """serve's bound on every client's memories together (100,000 ids), on what a replica answers at once: the
    requests of one @serve.batch call past it get the error line for a new id; the ids already held keep theirs.
    (The replica's own answering, in this process: no cluster holds 11 requests of 10,000 ids in one batch on cue.)"""
    replica = local_replica(EXAMPLES / "lstm")
    obs = json.dumps([0.1 * k for k in range(10)])
    body = b"".join(f'{{"id": {i}, "obs": {obs}}}\n'.encode() for i in range(10_000))
    answers = replica.answer_now([(None, body)] * 11)
    assert [a[0] for a in answers] == [200] * 11
    texts = [a[1].decode().splitlines() for a in answers]
    assert all('"error"' not in t for request in texts[:10] for t in request)
    assert all("the server holds its most LSTM memories (100000 ids" in t for t in texts[10]), texts[10][:2]
    assert answers[-1][-1]["lines"] == 110_000 and answers[-1][-1]["errors"] == 10_000


def test_v2_on_ray_carries_its_memory(lstm_server):
    """V2 on an LSTM: recurrent_in in, recurrent_out out, as the library's memory; a sequence_id (a memory kept
    between requests) is refused in one line: replicas keep none."""
    import inference

    policy = inference.load(EXAMPLES / "lstm")
    _, _, text = lstm_server.call("/v2/models/stats")
    name = json.loads(text)["model_stats"][0]["name"]
    meta = json.loads(lstm_server.call(f"/v2/models/{name}")[2])
    obs_name, obs_shape = meta["inputs"][0]["name"], meta["inputs"][0]["shape"][1:]
    size = [i for i in meta["inputs"] if i["name"] == "recurrent_in"][0]["shape"][-1]
    rng = np.random.RandomState(5)
    obs = rng.randn(3, *obs_shape).astype(np.float32)
    memory = (rng.randn(3, 1, size) * 0.3).astype(np.float32)
    body, headers = v2_request({obs_name: obs, "recurrent_in": memory}, True)
    got = v2_outputs(*lstm_server.call(f"/v2/models/{name}/infer", body, headers))
    want = policy.act(obs, memory=memory.reshape(3, size))
    np.testing.assert_array_equal(got["recurrent_out"].reshape(3, size), np.asarray(want["memory"]).reshape(3, size))
    request = json.loads(v2_request({obs_name: obs[:1]}, False)[0])
    request["parameters"] = {"sequence_id": 7, "sequence_start": True}
    status, error = lstm_server.one_line_error(f"/v2/models/{name}/infer", json.dumps(request).encode())
    assert status == 400 and error.startswith('parameter "sequence_id": not with --ray'), error
    lstm_server.log_is_one_liners()


def test_local_ray_lstm_server_ends_cleanly_on_sigterm(lstm_server):
    """(Before the two-node test, which counts the replica processes below this one.)"""
    code, _, all_gone = lstm_server.stop()
    assert code == 0 and all_gone
    lstm_server.log_is_one_liners()


def test_two_node_loopback_cluster_gives_the_same_answers(tmp_path, two_node_cluster):
    """--replicas 2 on a head and a worker of one CPU each: a replica on each node, and the answers are the stream's,
    the LSTM's memories travelling with the lines from one replica to the other."""
    server = Server(
        tmp_path, "--ray", two_node_cluster, "--replicas", "2", "--model-dir", EXAMPLES / "lstm", env=cluster_env()
    )
    try:
        assert server.err.read_text() == f"[serve] ray serve listening on {server.url} (2 replicas)\n"
        check_lstm(server)
        below = family(os.getpid())  # (the nodes are this test's; a replica Ray Serve replaces may linger a while)
        replicas = [p for p, c in below.items() if "ServeReplica" in c]
        raylets = {parent(p) for p in replicas}
        assert len(replicas) >= 2 and len(raylets) >= 2, {p: below.get(q, "") for p in replicas for q in [parent(p)]}
    finally:
        code, seconds, _ = server.stop()
    assert code == 0 and seconds < 90, (code, seconds)
    assert server.err.read_text() == f"[serve] ray serve listening on {server.url} (2 replicas)\n"


def test_two_behaviours_of_a_run_folder_are_a_deployment_each_routed_by_model(tmp_path):
    """serve --ray of a run folder of two behaviours: an application (a deployment) per model; one request's lines,
    interleaved, each answered by its model's replica, equal to load(<that checkpoint>).act() within 1e-5 and naming
    its model and version; no model, an unknown model and a version not loaded each one error line; V2 by name and
    by name and version; the repository API off without --allow-model-control (serve's 403)."""
    import inference as I

    run = two_behaviour_run(tmp_path)
    rng = np.random.RandomState(5)
    vo, ho = rng.uniform(-1, 1, (4, 8)).astype(np.float32), rng.uniform(-1, 1, (4, 12)).astype(np.float32)
    want_v = I.load(run / "Vector" / "Vector-100000.pt").act(vo)  # (the newest of each: what serves)
    want_h = I.load(run / "Hybrid" / "Hybrid-40000.pt").act(ho)
    lines = []
    for i in range(4):
        lines.append({"id": f"v{i}", "model": "Vector", "obs": vo[i].tolist()})
        lines.append({"id": f"h{i}", "model": "Hybrid", "version": 40000, "obs": ho[i].tolist()})
    lines += [
        {"id": "none", "obs": vo[0].tolist()},
        {"id": "other", "model": "Keeper", "obs": vo[0].tolist()},
        {"id": "old", "model": "Vector", "version": 50000, "obs": vo[0].tolist()},
    ]
    server = Server(tmp_path, "--ray", "local", "--replicas", "1", "--model-dir", run)
    try:
        refused = server.one_line_error("/v2/repository/models/Vector/load", b"{}")
        status, heads, text = server.call("/v1/act", lines_body([json.dumps(line) for line in lines]))
        one = json.loads(server.post(json.dumps(lines[1]).encode()))
        v2 = {}
        for path, obs in (("Vector", vo), ("Hybrid/versions/40000", ho)):
            body = {
                "inputs": [
                    {"name": "obs_0", "datatype": "FP32", "shape": list(obs.shape), "data": obs.ravel().tolist()}
                ]
            }
            v2[path] = server.call(f"/v2/models/{path}/infer", json.dumps(body).encode())
        unknown = server.one_line_error("/v2/models/Hybrid/versions/3/infer", b"{}")
        said = server.err.read_text()
    finally:
        code, _, _ = server.stop()
    assert code == 0 and "(1 replica for each of 2 models (Hybrid, Vector))" in said, said
    assert status == 200 and heads["Content-Type"] == "application/x-ndjson"
    got = [json.loads(t) for t in text.decode().splitlines()]
    assert [a["id"] for a in got] == [line["id"] for line in lines]
    for i in range(4):
        v, h = got[2 * i], got[2 * i + 1]
        assert (v["model"], v["version"], h["model"], h["version"]) == ("Vector", "100000", "Hybrid", "40000")
        assert np.abs(np.asarray(v["continuous_actions"]) - want_v["continuous_actions"][i]).max() <= 1e-5
        assert np.abs(np.asarray(h["continuous_actions"]) - want_h["continuous_actions"][i]).max() <= 1e-5
        assert h["discrete_actions"] == want_h["discrete_actions"][i].tolist()
    assert got[8] == {"id": "none", "error": "name the model: 2 are served (Hybrid, Vector)"}
    assert got[9] == {"id": "other", "error": "model Keeper: not served (served: Hybrid, Vector)"}
    assert got[10] == {"id": "old", "error": "model Vector: version 50000 is not loaded (loaded: 100000)"}
    assert one["model"] == "Hybrid" and one["discrete_actions"] == want_h["discrete_actions"][0].tolist()
    for path, want in (("Vector", want_v), ("Hybrid/versions/40000", want_h)):
        status, _, body = v2[path]
        answer = json.loads(body)
        assert status == 200 and (answer["model_name"], answer["model_version"]) == (
            path.split("/")[0],
            "100000" if path == "Vector" else "40000",
        )
        out = next(o for o in answer["outputs"] if o["name"] == "deterministic_continuous_actions")
        assert np.abs(np.asarray(out["data"]).reshape(out["shape"]) - want["continuous_actions"]).max() <= 1e-5
    assert unknown[0] == 404 and "40000" in unknown[1]
    assert refused == (403, "the repository API is off: start serve with --allow-model-control to load and unload")


def test_following_a_run_on_ray_rolls_a_new_version_out_by_the_deployments_update(tmp_path):
    """serve --ray --follow: a behaviour that appears in the followed folder after the start (files first, its
    training_status.json record after) is served, a new application; a checkpoint mlagents-learn finishes is verified
    in the command, then rolled out to its model's deployment by a new user_config (Ray Serve's lightweight update:
    PolicyReplica.reconfigure); the other model keeps its version; every answer equals its version's checkpoint and
    names it; one line on stderr says each."""
    import inference as I

    run = copy_run(EXAMPLES / "vector", tmp_path, "one")  # (Vector alone: a second application fits 2 CPUs)
    obs = np.random.RandomState(6).uniform(-1, 1, 8).astype(np.float32)
    ho = np.random.RandomState(7).uniform(-1, 1, 12).astype(np.float32)
    server = Server(tmp_path, "--ray", "local", "--model-dir", run, "--follow", "--follow-poll-s", "0.5")
    try:
        line = json.dumps({"id": 1, "model": "Vector", "obs": obs.tolist()}).encode()
        before = json.loads(server.post(line))
        add_hybrid(run)
        hybrid_line = json.dumps({"id": 2, "model": "Hybrid", "obs": ho.tolist()}).encode()
        for _ in range(600):  # (bounded: until the new model answers, or about 120 s)
            appeared = json.loads(server.post(hybrid_line))
            if "error" not in appeared:
                break
            time.sleep(0.2)
        newer = write_checkpoint(run, "Vector", 150000, run / "Vector" / "Vector-100000.pt", scale=1.5)
        seen, deadline = [], time.monotonic() + 120
        while time.monotonic() < deadline:  # (bounded: until an answer names the new version, or 120 s)
            answer = json.loads(server.post(line))
            seen.append(answer["version"])
            if answer["version"] == "150000":
                break
            time.sleep(0.2)
        after = [json.loads(server.post(line)) for _ in range(3)]
        hybrid = json.loads(server.post(hybrid_line))
        for _ in range(300):  # (bounded: the rollout's line once Ray Serve says the application runs again)
            if "version 150000 rolled out" in (said := server.err.read_text()):
                break
            time.sleep(0.2)
    finally:
        code, _, _ = server.stop()
    assert code == 0
    assert (before["model"], before["version"]) == ("Vector", "100000")
    want_before = I.load(run / "Vector" / "Vector-100000.pt").act(obs)["continuous_actions"]
    want_after = I.load(newer).act(obs)["continuous_actions"]
    want_h = I.load(run / "Hybrid" / "Hybrid-40000.pt").act(ho)
    assert np.abs(want_before - want_after).max() > 1e-3  # (two policies: the version shows in the actions)
    assert np.abs(np.asarray(before["continuous_actions"]) - want_before).max() <= 1e-5
    for answer in (appeared, hybrid):  # (the new model, before and after the other's rollout)
        assert (answer["model"], answer["version"]) == ("Hybrid", "40000"), answer
        assert np.abs(np.asarray(answer["continuous_actions"]) - want_h["continuous_actions"]).max() <= 1e-5
        assert answer["discrete_actions"] == want_h["discrete_actions"].tolist()
    assert seen and seen[-1] == "150000" and set(seen) <= {"100000", "150000"}, seen
    for answer in after:
        assert answer["version"] == "150000"
        assert np.abs(np.asarray(answer["continuous_actions"]) - want_after).max() <= 1e-5
    assert "[serve] ray: model Hybrid version 40000 rolled out" in said, said
    assert "[serve] ray: model Vector version 150000 rolled out" in said, said
    assert "Traceback" not in said, said[-2000:]


def test_versions_and_the_repository_api_on_ray_answer_as_serve(tmp_path):
    """serve --ray --versions 2 --allow-model-control on a run folder of two behaviours: each model's deployment keeps
    its newest 2 verified versions (Vector's 50000 and 100000, one replica holding both); a line's "version" and V2's
    /versions/{v} reach either, equal to load(<that checkpoint>).act() within 1e-5 and naming both; a version not
    loaded is serve's one line. The repository API over the ingress, as serve --http's: the index; a load naming a
    version (pinned: what a line without one gets); an unload of a version (refused after it); an unload of a model
    (its application deleted: its lines refused, UNAVAILABLE in the index) and its load again (a new application,
    V2 ready 503 while it loads); paths outside the served folders, unknown models and a flood of loads, one line
    each. /metrics counts lines per model and version; stderr is serve's one-liners."""
    import threading

    import inference as I

    run = two_behaviour_run(tmp_path)
    rng = np.random.RandomState(9)
    vo, ho = rng.uniform(-1, 1, (2, 8)).astype(np.float32), rng.uniform(-1, 1, (2, 12)).astype(np.float32)
    want = {
        step: I.load(run / "Vector" / f"Vector-{step}.pt").act(vo)["continuous_actions"] for step in (50000, 100000)
    }
    want_h = I.load(run / "Hybrid" / "Hybrid-40000.pt").act(ho)
    assert np.abs(want[50000] - want[100000]).max() > 1e-3  # (two policies: the version shows in the actions)

    def v_lines(version=None) -> bytes:
        named = {} if version is None else {"version": version}
        return lines_body([json.dumps({"id": i, "model": "Vector", **named, "obs": vo[i].tolist()}) for i in range(2)])

    def answers(body: bytes) -> list:
        status, _, text = server.call("/v1/act", body)
        return [status] + [json.loads(line) for line in text.decode().splitlines()]

    def v2(path: str, obs: np.ndarray) -> tuple:
        inputs = [{"name": "obs_0", "datatype": "FP32", "shape": list(obs.shape), "data": obs.ravel().tolist()}]
        status, _, text = server.call(f"/v2/models/{path}/infer", json.dumps({"inputs": inputs}).encode())
        return status, json.loads(text)

    def control(path: str, body: Optional[dict] = None) -> tuple:
        status, _, text = server.call(f"/v2/repository/{path}", json.dumps(body or {}).encode())
        return status, json.loads(text) if text.strip() else None

    outside = tmp_path / "outside"
    outside.mkdir()
    server = Server(
        tmp_path, "--ray", "local", "--model-dir", run, "--versions", "2", "--allow-model-control", within=400
    )
    try:
        by_version = {v: answers(v_lines(v)) for v in (50000, "100000", None)}
        not_loaded = answers(v_lines(7))
        v2_old, v2_new = v2("Vector/versions/50000", vo), v2("Vector", vo)
        v2_unknown = server.one_line_error("/v2/models/Vector/versions/7/infer", b"{}")
        metadata = json.loads(server.call("/v2/models/Vector/versions/50000")[2])
        first = control("index")
        pinned = control("models/Vector/load", {"parameters": {"version": "50000"}})
        after_pin = answers(v_lines())
        dropped = control("models/Vector/unload", {"parameters": {"version": "100000"}})
        after_drop = answers(v_lines(100000))
        unloaded = control("models/Hybrid/unload")
        hybrid_gone = server.call("/v1/act", json.dumps({"id": 1, "model": "Hybrid", "obs": ho[0].tolist()}).encode())
        index_gone = control("index")[1]
        loading: list = []
        loader = threading.Thread(target=lambda: loading.append(control("models/Hybrid/load")))
        loader.start()
        seen = set()
        for _ in range(3000):  # (bounded: the ready answers while the load runs, until it is answered)
            seen.add(server.call("/v2/models/Hybrid/ready")[0])
            if not loader.is_alive():
                break
            time.sleep(0.02)
        loader.join(300)
        ready_after = server.call("/v2/models/Hybrid/ready")[0]
        hybrid_back = v2("Hybrid", ho)
        hostile = {
            "dotdot": control("models/..%2F..%2Fetc/load"),
            "absolute": control(f"models/{str(outside).replace('/', '%2F')}/load"),
            "unknown": control("models/Keeper/load"),
            "version": control("models/Vector/load", {"parameters": {"version": "7"}}),
            "bad body": server.call("/v2/repository/models/Vector/load", b"[1, 2]")[0],
        }
        with ThreadPoolExecutor(40) as pool:
            flood = list(
                pool.map(lambda _: control("models/Vector/load", {"parameters": {"version": "50000"}}), range(40))
            )
        still = answers(v_lines())
        metrics = server.call("/metrics")[2].decode()
    finally:
        code, _, _ = server.stop()
    assert code == 0
    for version, got in by_version.items():
        step = int(version or 100000)
        assert got[0] == 200 and [(a["model"], a["version"]) for a in got[1:]] == [("Vector", str(step))] * 2, got
        assert np.abs(np.asarray([a["continuous_actions"] for a in got[1:]]) - want[step]).max() <= 1e-5
    assert not_loaded[1:] == [
        {"id": i, "error": "model Vector: version 7 is not loaded (loaded: 50000, 100000)"} for i in range(2)
    ]
    for (status, answer), step in ((v2_old, 50000), (v2_new, 100000)):
        assert status == 200 and (answer["model_name"], answer["model_version"]) == ("Vector", str(step)), answer
        out = next(o for o in answer["outputs"] if o["name"] == "deterministic_continuous_actions")
        assert np.abs(np.asarray(out["data"]).reshape(out["shape"]) - want[step]).max() <= 1e-5
    assert v2_unknown == (404, "unknown version '7' of model 'Vector': loaded 50000, 100000")
    assert metadata["versions"] == ["50000", "100000"]
    assert first == (
        200,
        [
            {"name": "Hybrid", "version": "40000", "state": "READY", "reason": "serving"},
            {"name": "Vector", "version": "50000", "state": "READY", "reason": "loaded"},
            {"name": "Vector", "version": "100000", "state": "READY", "reason": "serving"},
        ],
    )
    assert pinned == dropped == unloaded == (200, None)
    assert [a["version"] for a in after_pin[1:]] == ["50000"] * 2
    assert np.abs(np.asarray([a["continuous_actions"] for a in after_pin[1:]]) - want[50000]).max() <= 1e-5
    assert after_drop[1:] == [
        {"id": i, "error": "model Vector: version 100000 is not loaded (loaded: 50000)"} for i in range(2)
    ]
    assert hybrid_gone[0] == 400 and json.loads(hybrid_gone[2]) == {
        "id": 1,
        "error": "model Hybrid: not served (served: Vector)",
    }
    assert {"name": "Hybrid", "version": "", "state": "UNAVAILABLE", "reason": "unloaded"} in index_gone
    assert loading == [(200, None)] and 503 in seen and ready_after == 200, (loading, seen, ready_after)
    status, answer = hybrid_back
    assert status == 200 and answer["model_version"] == "40000"
    out = next(o for o in answer["outputs"] if o["name"] == "deterministic_discrete_actions")
    assert np.asarray(out["data"]).reshape(out["shape"]).tolist() == want_h["discrete_actions"].tolist()
    for name, got in hostile.items():
        status, body = (got, None) if name == "bad body" else got
        assert status in (400, 404), (name, got)
        assert body is None or (set(body) == {"error"} and "\n" not in body["error"]), (name, body)
    assert "'..' is refused" in hostile["dotdot"][1]["error"]
    assert "leads outside the served folders" in hostile["absolute"][1]["error"]
    assert hostile["unknown"][0] == 404 and hostile["version"][0] == 404
    assert {status for status, _ in flood} <= {200, 503} and 200 in {status for status, _ in flood}, flood
    assert all(body is None or "repository calls are running already" in body["error"] for _, body in flood)
    assert [a["version"] for a in still[1:]] == ["50000"] * 2
    per = dict(re.findall(r'^mlagents_serve_model_lines_total\{model="Vector",version="(\d+)"\} (\S+)$', metrics, re.M))
    assert float(per["50000"]) == 7, per  # (6 lines and 1 V2 request at 50000)
    said = server.err.read_text()
    assert "[serve] ray: model Hybrid unloaded (its application deleted)" in said, said
    server.log_is_one_liners()


def test_two_behaviours_on_the_two_node_loopback_cluster(tmp_path, two_node_cluster):
    """A run folder of two behaviours on a head and a worker of one CPU each: a deployment per model, each model's
    answers its checkpoint's, naming model and version."""
    import inference as I

    run = two_behaviour_run(tmp_path)
    rng = np.random.RandomState(8)
    vo, ho = rng.uniform(-1, 1, (3, 8)).astype(np.float32), rng.uniform(-1, 1, (3, 12)).astype(np.float32)
    want_v = I.load(run / "Vector" / "Vector-100000.pt").act(vo)["continuous_actions"]
    want_h = I.load(run / "Hybrid" / "Hybrid-40000.pt").act(ho)["continuous_actions"]
    lines = [{"id": i, "model": "Vector", "obs": vo[i].tolist()} for i in range(3)]
    lines += [{"id": 10 + i, "model": "Hybrid", "obs": ho[i].tolist()} for i in range(3)]
    server = Server(tmp_path, "--ray", two_node_cluster, "--replicas", "1", "--model-dir", run, env=cluster_env())
    try:
        status, _, text = server.call("/v1/act", lines_body([json.dumps(line) for line in lines]))
    finally:
        code, seconds, _ = server.stop()
    assert code == 0 and seconds < 90, (code, seconds)
    got = [json.loads(t) for t in text.decode().splitlines()]
    assert status == 200 and [a["id"] for a in got] == [0, 1, 2, 10, 11, 12]
    for i in range(3):
        v, h = got[i], got[3 + i]
        assert (v["model"], v["version"], h["model"], h["version"]) == ("Vector", "100000", "Hybrid", "40000")
        assert np.abs(np.asarray(v["continuous_actions"]) - want_v[i]).max() <= 1e-5
        assert np.abs(np.asarray(h["continuous_actions"]) - want_h[i]).max() <= 1e-5


def test_refusals(tmp_path):
    common = ["--mode", "serve", "--model-dir", EXAMPLES / "vector"]
    for args, says in (
        (["--ray", "local"], "needs --http HOST:PORT"),
        (["--ray", "local", "--http", "127.0.0.1:70000"], "the port must be a whole number from 0 to 65535"),
        (["--ray", "local", "--http", f"0.0.0.0:{free_port()}"], "binds every interface"),
        (["--ray", "local", "--http", "127.0.0.1:1", "--listen", "127.0.0.1:0"], "--listen: not with --ray"),
        (["--ray", f"127.0.0.1:{free_port()}", "--http", f"127.0.0.1:{free_port()}"], "no Ray cluster there"),
    ):
        result = cli(*common, *args, timeout=120)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert says in result.stderr and result.stdout == ""


def test_a_replica_that_cannot_load_the_policy_is_one_line(tmp_path):
    """A replica's own failure (here its checkpoint path, changed in the driver alone, names no file on the node): Ray
    Serve gives up on the deployment and the command ends in one line naming the replica's error, exit 2."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import mlagents_inference.fronts.ray_serve as r, inference; "
        "model = r.ray_model; "
        "r.ray_model = lambda ctx: {**model(ctx), 'checkpoint': '/nonexistent/x.pt', 'model_dir': None, 'onnx': None}; "
        "sys.exit(inference.main(sys.argv[2:]))"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(ROOT),
            "--mode",
            "serve",
            "--ray",
            "local",
            "--http",
            f"127.0.0.1:{free_port()}",
            "--model-dir",
            EXAMPLES / "vector",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(RAY_SERVE_MAX_PER_REPLICA_RETRY_COUNT="1"),
        cwd=tmp_path,
    )
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert (
        result.stderr
        == "error: --ray: Ray Serve could not deploy the replicas: /nonexistent/x.pt: no such checkpoint file\n"
    )


def test_more_replicas_than_cpus_end_in_one_line_in_time(tmp_path):
    """Replicas that find no free CPU (a local instance has as many as the machine) wait; the command gives up within
    its bound (MLAGENTS_RAY_SERVE_READY_S, 600 s by default) in one line, exit 2."""
    t0 = time.time()
    result = cli(
        "--mode",
        "serve",
        "--ray",
        "local",
        "--replicas",
        (os.cpu_count() or 1) + 2,
        "--http",
        f"127.0.0.1:{free_port()}",
        "--model-dir",
        EXAMPLES / "vector",
        timeout=300,
        env=child_env(MLAGENTS_RAY_SERVE_READY_S="15"),
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(
        "error: --ray: the replicas did not start within 15 s (not enough GPUs, NPUs or CPUs"
    )
    assert time.time() - t0 < 120


def test_a_replicas_v2_refusals_carry_their_status():
    """A replica answers V2 through the data plane as serve does: the engine's own failure 500 (it was 400), an
    unknown model 404, a request that does not fit 400. (The replica's own answering, in this process, one request a
    call: its engine, a real one, wrapped to fail on one observation value.)"""
    import asyncio

    replica = local_replica(EXAMPLES / "vector")
    run = replica.policy.engine.run

    def run_or_fail(flat, names=None):
        if np.any(np.asarray(flat[0]) == 1234.5):
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : provoked by the test")
        return run(flat, names)

    replica.policy.engine.run = run_or_fail

    async def unbatched(request):  # (@serve.batch needs a replica's context: the same answering, a request a call)
        return (await replica.answer_requests([request]))[0]

    replica.answer = unbatched
    name = replica.view.name

    def infer(model_name: str, obs: list) -> tuple:
        body = json.dumps(
            {"inputs": [{"name": "obs_0", "datatype": "FP32", "shape": [len(obs), len(obs[0])], "data": obs}]}
        )
        status, text, _, _, _ = asyncio.run(replica.infer(model_name, None, body.encode(), None))
        return status, json.loads(text)

    good = [[0.1 * k for k in range(8)], [0.2] * 8]
    status, answer = infer(name, good)
    assert status == 200 and answer["outputs"], answer
    status, answer = infer(name, [good[0], [0.2] * 7 + [1234.5]])
    assert status == 500 and "engine failed" in answer["error"], (status, answer)
    status, answer = infer("Nope", good)
    assert status == 404 and "unknown model 'Nope'" in answer["error"], (status, answer)
    status, answer = infer(name, [row[:5] for row in good])
    assert status == 400 and "shape" in answer["error"], (status, answer)
