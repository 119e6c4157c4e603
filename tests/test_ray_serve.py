"""serve --ray: Ray Serve replicas behind Ray Serve's HTTP ingress, on a real local Ray instance and on a real two-node
cluster on this machine (head and worker on 127.0.0.1, one CPU each), as tests/test_ray.py builds it. No mocks. Every
POST /v1/act answer must be, byte for byte, the line `--mode stream` writes for the same line: bad lines' errors too,
and an LSTM's next memory when the line carries its memory (replicas share none).

In the Ray group (`-m ray`): it needs requirements-ray.txt (Ray Serve), and each Ray start takes tens of seconds."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, child_env, cli

pytestmark = pytest.mark.ray
pytest.importorskip("ray.serve", reason="serve --ray needs Ray Serve: pip install -r requirements-ray.txt")
from test_ray import cluster_env, family, free_port, gone, two_node_cluster  # noqa: E402,F401 (a fixture)

LIMIT = 4096  # --max-line-bytes on both sides: a longer line is answered with an error


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


def test_local_ray_ends_cleanly_on_sigterm(vector_server):
    code, seconds, all_gone = vector_server.stop()
    assert code == 0 and seconds < 60 and all_gone, (code, seconds)  # SIGTERM: a server's normal end, as serve's
    assert vector_server.err.read_text() == f"[serve] ray serve listening on {vector_server.url} (1 replica)\n"
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


def test_local_ray_lstm_lines_carry_their_memory(tmp_path):
    server = Server(tmp_path, "--ray", "local", "--replicas", "1", "--model-dir", EXAMPLES / "lstm")
    try:
        check_lstm(server)
    finally:
        code, _, all_gone = server.stop()
    assert code == 0 and all_gone


def test_two_node_loopback_cluster_gives_the_same_answers(tmp_path, two_node_cluster):  # noqa: F811
    """--replicas 2 on a head and a worker of one CPU each: a replica on each node, and the answers are the stream's,
    the LSTM's memories travelling with the lines from one replica to the other."""
    server = Server(
        tmp_path, "--ray", two_node_cluster, "--replicas", "2", "--model-dir", EXAMPLES / "lstm", env=cluster_env()
    )
    try:
        assert server.err.read_text() == f"[serve] ray serve listening on {server.url} (2 replicas)\n"
        check_lstm(server)
        replicas = [p for p, c in family(os.getpid()).items() if "ServeReplica" in c]  # (the nodes are this test's)
        assert len(replicas) == 2 and len({parent(p) for p in replicas}) == 2, replicas  # two raylets: two nodes
    finally:
        code, seconds, _ = server.stop()
    assert code == 0 and seconds < 90, (code, seconds)
    assert server.err.read_text() == f"[serve] ray serve listening on {server.url} (2 replicas)\n"


def test_refusals(tmp_path):
    common = ["--mode", "serve", "--model-dir", EXAMPLES / "vector"]
    for args, says in (
        (["--ray", "local"], "needs --http HOST:PORT"),
        (["--ray", "local", "--http", "127.0.0.1:0"], "port number 1-65535"),
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
