"""serve's event loop, chosen as uvicorn's --loop is (auto | asyncio | uvloop): uvloop answers what asyncio answers on
every front (JSON lines, V2 REST, V2 gRPC), and the stats line says which loop served; --loop uvloop where uvloop is
not installed, a --loop that is not one of the three, and --loop where it would be ignored are refused in one line
(exit 2). uvloop is optional: where it is not installed, auto serves on asyncio's loop, and the comparison is skipped
(except where CI is set: requirements.txt lists uvloop, so a CI run without it is a broken set-up)."""

import http.client
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, child_env, cli, dial, exchange, read_until_closed, refused, serve_process

UVLOOP = importlib.util.find_spec("uvloop") is not None
VECTOR = EXAMPLES / "vector"  # (its behaviour Vector: obs_0 of 8 floats, 2 continuous actions)

# inference.py run with uvloop unimportable, as on a host without it (tests/no_torch.py does the same for torch)
WITHOUT_UVLOOP = f"""import runpy, sys
sys.modules["uvloop"] = None
sys.argv[0] = {str(ROOT / "inference.py")!r}
sys.path.insert(0, {str(ROOT)!r})
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def rows(n: int, seed: int) -> np.ndarray:
    return np.random.RandomState(seed).normal(size=(n, 8)).astype(np.float32)


def close_enough(a, b, path: str = "answer") -> None:
    """The same structure and text; numbers within 1e-5 (two engine calls may batch the rows differently)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), (path, a, b)
        for key in a:
            close_enough(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (path, a, b)
        for k, (x, y) in enumerate(zip(a, b)):
            close_enough(x, y, f"{path}[{k}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), (path, a, b)
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (path, a, b)
    else:
        assert a == b, (path, a, b)


def lines_answers(where: str) -> list:
    """Deterministic lines (one at a time and 16 at once) and an info line, over one connection."""
    obs = rows(17, 1)
    sock = dial(where)
    try:
        lines = [{"id": 0, "obs": obs[0].tolist()}]
        lines += [{"id": k, "obs": obs[k].tolist()} for k in range(1, 17)]
        lines += [{"info": True}, {"id": "bad", "obs": [1.0]}]
        answers = exchange(sock, [lines[0]])
        return answers + exchange(sock, lines[1:])
    finally:
        sock.close()


def rest_answers(where: str) -> list:
    host, port = where.rsplit(":", 1)
    answers = []
    for body in (
        {"inputs": [{"name": "obs_0", "shape": [5, 8], "datatype": "FP32", "data": rows(5, 2).reshape(-1).tolist()}]},
        {"inputs": [{"name": "obs_0", "shape": [1, 8], "datatype": "FP32", "data": rows(1, 3).reshape(-1).tolist()}]},
        {"inputs": [{"name": "obs_0", "shape": [1, 7], "datatype": "FP32", "data": [0.0] * 7}]},  # refused: 400
    ):
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            body["outputs"] = [{"name": "deterministic_continuous_actions"}]  # (the sampled ones draw a new seed)
            conn.request("POST", "/v2/models/Vector/infer", json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            answers.append([response.status, json.loads(response.read())])
        finally:
            conn.close()
    for path in ("/v2/models/Vector", "/v2/health/ready"):
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            answers.append([response.status, response.read().decode()])
        finally:
            conn.close()
    return answers


def grpc_answers(where: str) -> list:
    grpc = pytest.importorskip("grpc")
    pb = pytest.importorskip("tritonclient.grpc.service_pb2")
    service = pytest.importorskip("tritonclient.grpc.service_pb2_grpc")
    answers = []
    with grpc.insecure_channel(where) as channel:
        stub = service.GRPCInferenceServiceStub(channel)
        for obs in (rows(5, 4), rows(1, 5), np.zeros((1, 7), np.float32)):
            request = pb.ModelInferRequest(model_name="Vector")
            request.inputs.add(name="obs_0", datatype="FP32", shape=list(obs.shape)).contents.fp32_contents.extend(
                obs.reshape(-1).tolist()
            )
            request.outputs.add(name="deterministic_continuous_actions")
            try:
                response = stub.ModelInfer(request, timeout=60)
            except grpc.RpcError as exc:
                answers.append([exc.code().name, exc.details()])
                continue
            out = response.outputs[0]
            data = np.frombuffer(response.raw_output_contents[0], "<f4") if response.raw_output_contents else None
            contents = list(out.contents.fp32_contents) if data is None else data.tolist()
            answers.append([out.name, out.datatype, list(out.shape), [float(x) for x in contents]])
        metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name="Vector"), timeout=60)
        answers.append([[t.name, t.datatype, list(t.shape)] for t in (*metadata.inputs, *metadata.outputs)])
    return answers


def serve_and_ask(loop: str) -> tuple:
    """serve --loop LOOP on every front: (its answers on each, its stats line at SIGTERM, its exit code)."""
    proc, _, said = serve_process(
        "--model-dir", VECTOR, "--loop", loop, "--stream-stats", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
        "--grpc", "127.0.0.1:0", says="grpc",
    )  # fmt: skip
    try:
        listen, http_at = (re.search(rf"{says} on (\S+)", said).group(1) for says in ("listening", "http"))
        answers = {"lines": lines_answers(listen), "rest": rest_answers(http_at.removeprefix("http://"))}
        answers["grpc"] = grpc_answers(re.search(r"grpc on (\S+)", said).group(1))
    finally:
        proc.send_signal(signal.SIGTERM)
        said += read_until_closed(proc.stderr.fileno(), 60).decode(errors="replace")
        code = proc.wait(60)
    return answers, [line for line in said.splitlines() if line.startswith("[serve] lines=")], code


@pytest.mark.skipif(
    not UVLOOP and not os.environ.get("CI"), reason="uvloop is not installed (optional: pip install uvloop)"
)
def test_uvloop_answers_every_front_as_asyncio_does_and_the_stats_line_names_the_loop():
    pytest.importorskip("aiohttp")
    pytest.importorskip("grpc")
    on_asyncio, asyncio_stats, asyncio_code = serve_and_ask("asyncio")
    on_uvloop, uvloop_stats, uvloop_code = serve_and_ask("uvloop")
    assert (asyncio_code, uvloop_code) == (0, 0)
    assert len(asyncio_stats) == len(uvloop_stats) == 1, (asyncio_stats, uvloop_stats)
    assert asyncio_stats[0].endswith(" loop=asyncio") and uvloop_stats[0].endswith(" loop=uvloop")
    counts = [re.findall(r"(lines|errors|connections)=(\d+)", stats[0]) for stats in (asyncio_stats, uvloop_stats)]
    assert counts[0] == counts[1] and len(counts[0]) == 3, counts
    close_enough(on_asyncio, on_uvloop)
    assert [a.get("id") for a in on_uvloop["lines"]] == [*range(17), None, "bad"]
    assert [status for status, _ in on_uvloop["rest"]] == [200, 200, 400, 200, 200]
    assert on_uvloop["grpc"][2][0] == "INVALID_ARGUMENT"


def test_auto_serves_on_uvloop_where_installed_and_on_asyncio_without_it_silently():
    """The default: uvloop where it is installed (this interpreter), asyncio where it is not, nothing said of it."""
    code = "\n".join(
        [
            "import sys",
            "sys.modules['uvloop'] = None" if not UVLOOP else "import uvloop",
            f"sys.path.insert(0, {str(ROOT)!r})",
            "from mlagents_inference.services.serve_common import loop_maker",
            "name, make = loop_maker('auto')",
            "loop = make()",
            "print(name, type(loop).__module__.split('.')[0])",
            "loop.close()",
            "sys.modules['uvloop'] = None",
            "name, make = loop_maker('auto')",
            "loop = make()",
            "print(name, type(loop).__module__.split('.')[0])",
            "loop.close()",
        ]
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_env())
    assert done.returncode == 0, done.stderr
    first = "uvloop uvloop" if UVLOOP else "asyncio asyncio"
    assert done.stdout.splitlines() == [first, "asyncio asyncio"]
    assert done.stderr == ""


def test_without_uvloop_auto_serves_on_asyncio_and_uvloop_is_refused_in_one_line(tmp_path):
    program = tmp_path / "without_uvloop.py"
    program.write_text(WITHOUT_UVLOOP)
    done = subprocess.run(
        [sys.executable, str(program), "--mode", "serve", "--model-dir", str(VECTOR), "--loop", "uvloop"]
        + ["--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    refused(done, "--loop uvloop", "pip install uvloop")
    proc, where, said = serve_process(
        "--model-dir", VECTOR, "--loop", "auto", "--stream-stats", "--listen", "127.0.0.1:0", program=program
    )
    try:
        sock = dial(where)
        try:
            answer = exchange(sock, [{"id": 1, "obs": rows(1, 6)[0].tolist()}])
        finally:
            sock.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        said += read_until_closed(proc.stderr.fileno(), 60).decode(errors="replace")
        assert proc.wait(60) == 0, said
    assert answer[0]["id"] == 1 and len(answer[0]["continuous_actions"]) == 2, answer
    stats = [line for line in said.splitlines() if line.startswith("[serve] lines=")]
    assert len(stats) == 1 and stats[0].endswith(" loop=asyncio"), said
    assert "uvloop" not in said, said


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--loop", "trio", "--listen", "127.0.0.1:0"], ["--loop", "invalid choice", "auto", "asyncio", "uvloop"]),
        (["--loop", "asyncio", "--ray", "local", "--http", "127.0.0.1:0"], ["--loop", "--ray", "ignored"]),
    ],
)
def test_a_loop_not_of_the_three_or_where_it_would_be_ignored_is_refused(extra, words):
    refused(cli("--mode", "serve", "--model-dir", VECTOR, *extra, timeout=120), *words)


def test_loop_belongs_to_serve_alone():
    refused(cli("--mode", "action", "--model-dir", VECTOR, "--loop", "asyncio", timeout=120), "--loop", "serve")


def test_the_in_process_server_takes_the_loop_choice():
    from mlagents_inference.core.errors import UsageError
    from mlagents_inference.fronts.serve import serving

    with pytest.raises(UsageError, match="--loop trio"):
        with serving(None, loop="trio", listen="127.0.0.1:0"):
            pass


class AskedLoop:
    """Stands in for the event loop: what the batcher asks of it (a timer's delay, or a call at once)."""

    def __init__(self):
        self.asked = []

    def call_later(self, delay, callback, *args):
        self.asked.append(("later", delay))

    def call_soon(self, callback, *args):
        self.asked.append(("soon", callback.__name__))


class LoneLine:
    """One connection's line waiting (a services.batcher Owner)."""

    lines, scope, arrived, eof, closed, info, lockstep = [b"{}"], "0:", 0.0, False, False, False, True


def test_max_wait_is_whole_milliseconds_rounded_up_so_that_uvloop_waits_too():
    """uvloop rounds a timer to the nearest ms (one under 0.5 ms runs at once: no wait at all) and asyncio's selector
    waits in whole ms (one under 1 ms took about 1 ms): the wait the batcher asks is whole ms, rounded up, so that both
    loops wait as asyncio did."""
    import inference
    from mlagents_inference.services.batcher import Batcher, ServeOptions

    policy, asked = inference.load(VECTOR), {}
    for max_wait_us in (0, 1, 300, 1000, 1001, 400_000):
        batcher = Batcher(policy, ServeOptions(max_wait_us=max_wait_us))
        batcher.loop = AskedLoop()
        batcher.waiting(LoneLine(), 1)
        asked[max_wait_us] = batcher.loop.asked
    assert asked == {
        0: [("soon", "answer_pass")],
        1: [("later", 0.001)],
        300: [("later", 0.001)],
        1000: [("later", 0.001)],
        1001: [("later", 0.002)],
        400_000: [("later", 0.4)],
    }
