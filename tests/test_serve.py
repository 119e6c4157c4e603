"""serve mode (docs/serve.md): the stream's lines over TCP and Unix sockets, answered as the stream answers them, the
lines of every connection together; bounded per connection; SIGTERM drains; --http; inference.connect(). A server runs
in this process (fronts.serve.serving, on a thread, the command line's options) unless the process is what is tested
(signals, exit codes, its memory, a kill): then a real subprocess on 127.0.0.1 port 0 or a Unix socket in tmp_path,
killed in a finally. The stream it is compared with runs in this process too. Every loop is bounded."""

import contextlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from api_standins import REAL_MLAGENTS, behavior_spec, decision_steps, mlagents_mask, observation, terminal_steps
from conftest import BUNDLED, EXAMPLES, ROOT, child_env, dial, exchange, local_server, read_lines, refused, run

import inference as I

START_S = 120.0


def start(model=EXAMPLES / "vector", listen="127.0.0.1:0", *extra, env=None):
    """A server subprocess and what its stderr said: {"listen": "HOST:PORT"|"unix:PATH", "http": "HOST:PORT"}."""
    args = [sys.executable, str(ROOT / "inference.py"), "--mode", "serve", "--model-dir", str(model), *extra]
    args += ["--listen", listen] if listen else []
    proc = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or child_env()
    )
    said, deadline, text = {}, time.monotonic() + START_S, b""
    want = {"listen"} if listen else set()
    want |= {"http"} if "--http" in extra else set()
    try:
        while not want <= set(said):
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, (proc.poll(), text)
            if select.select([proc.stderr], [], [], left)[0]:
                text += os.read(proc.stderr.fileno(), 4096)
            for kind, where in re.findall(rb"\[serve\] (listening|http) on (\S+)\n", text):
                said["listen" if kind == b"listening" else "http"] = where.decode()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, said


@contextlib.contextmanager
def server(*args, **kwargs):
    proc, said = start(*args, **kwargs)
    try:
        yield proc, said
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def stream(capsys, model, lines: list, *extra) -> list:
    """The oracle: what `--mode stream` answers to the same lines, run in this process (conftest.run), each answer
    with the two fields serve adds: the model (the behaviour name) and its version ("1": one policy served)."""
    text = "".join((line.decode() if isinstance(line, bytes) else json.dumps(line)) + "\n" for line in lines)
    code, out, err = run(capsys, "--mode", "stream", "--model-dir", model, *extra, stdin=text)
    assert code == 0, err
    name = spec_of(model)["behavior"]
    return [{**json.loads(line), "model": name, "version": "1"} for line in out.splitlines()]


def spec_of(model) -> dict:
    return json.loads((model / "generated.json").read_text())


def lines_for(model, n: int, seed: int = 0, ids=None) -> list:
    """Stream lines for an example: plain ones, batched ones, masks, resets, and a few bad ones."""
    g, rng = spec_of(model), np.random.RandomState(seed)
    shapes = [tuple(o["shape"]) for o in g["observations"]]
    out = []
    for i in range(n):
        rows = 2 if i % 7 == 3 else None
        obs = [observation(rng, shape, rows or 1) for shape in shapes]
        obs = [o if rows else o[0] for o in obs]
        line = {"obs": obs[0].tolist()} if len(shapes) == 1 else {f"obs_{k}": o.tolist() for k, o in enumerate(obs)}
        line["id"] = (ids or [0, 1, "x"])[i % len(ids or [0, 1, "x"])] if rows is None else f"b{i}"
        if g["discrete_branches"] and i % 3 == 0 and rows is None:  # 1 = allowed; each branch's first action allowed
            line["action_masks"] = [
                int(k == 0 or rng.rand() < 0.6) for size in g["discrete_branches"] for k in range(size)
            ]
        if i % 11 == 5:
            line["reset"] = True
        out.append(line)
    out[n // 2] = b"not json"
    out[n // 3] = {"id": 5, "obs": [1, 2]}
    return out


@pytest.mark.parametrize("name", ["vector", "lstm", "discrete-multi", "hybrid"])
def test_answers_equal_the_streams_for_the_same_lines(capsys, name):
    model = EXAMPLES / name
    lines = lines_for(model, 60)
    with local_server(model) as (_, said):
        with dial(said["listen"]) as sock:
            got = exchange(sock, lines[:20]) + exchange(sock, lines[20:21]) + exchange(sock, lines[21:])
    assert got == stream(capsys, model, lines)
    assert any("error" in a for a in got) and sum("error" not in a for a in got) >= 50


def test_memory_is_kept_per_connection_and_id_and_the_info_line_answers(capsys):
    model = EXAMPLES / "lstm"
    a, b = lines_for(model, 30, seed=1, ids=[0]), lines_for(model, 30, seed=2, ids=[0])
    with local_server(model) as (_, said):
        with dial(said["listen"]) as one, dial(said["listen"]) as two:
            got_a, got_b = [], []
            for x, y in zip(a, b):  # interleaved: each connection's agent 0 is its own
                one.sendall((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n")
                two.sendall((y if isinstance(y, bytes) else json.dumps(y).encode()) + b"\n")
                got_a += read_lines(one, 1)
                got_b += read_lines(two, 1)
            info = exchange(one, [{"info": True, "id": 3}])[0]
    assert got_a == stream(capsys, model, a) and got_b == stream(capsys, model, b) and got_a != got_b
    local = I.load(model)
    assert info["id"] == 3 and info["info"]["memory_size"] == local.info["memory_size"] > 0
    assert {k: v for k, v in info["info"].items() if k != "checkpoint"} == {
        k: v for k, v in json.loads(json.dumps(local.info)).items() if k != "checkpoint"
    }


def test_bad_and_too_long_lines_get_error_answers_and_the_connection_goes_on(capsys, tmp_path):
    bad = [
        b"not json",
        b"[1, 2]",
        b'{"obs": [1, 2, 3]}',
        b'{"id": 4, "obs": "x"}',
        b'{"unknown": 1}',
        b"x" * 500,
        b'{"id": 9, "obs": [0, 0, 0, 0, 0, 0, 0, 1]}',
    ]
    with local_server(EXAMPLES / "vector", "unix:" + str(tmp_path / "s.sock"), "--max-line-bytes", "200") as (_, said):
        with dial(said["listen"]) as sock:
            got = exchange(sock, bad)
            assert exchange(sock, bad[-1:]) == got[-1:]
    assert got == stream(capsys, EXAMPLES / "vector", bad, "--max-line-bytes", "200")
    assert [("error" in a) for a in got] == [True] * 6 + [False] and got[5][
        "error"
    ] == "line longer than 200 bytes (--max-line-bytes)"


def test_a_client_killed_mid_batch_costs_nothing_to_the_others():
    model = BUNDLED
    line = json.dumps({"id": 1, "obs": [0.25] * 59}).encode() + b"\n"
    with server(model) as (proc, said):
        with dial(said["listen"]) as other:
            want = exchange(other, [line.strip()])
            for _ in range(5):
                gone = dial(said["listen"])
                gone.sendall(line * 3000)
                gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                gone.close()  # a reset, with its lines still being answered
                assert exchange(other, [line.strip()] * 3) == want * 3
        assert proc.poll() is None


def vm_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])


def test_a_client_that_never_reads_is_slowed_not_buffered_and_the_others_are_answered():
    line = json.dumps({"id": 1, "obs": [0.25] * 59}).encode() + b"\n"
    with server(BUNDLED) as (proc, said):
        with dial(said["listen"]) as other, dial(said["listen"]) as hog:
            want = exchange(other, [line.strip()])
            before = vm_rss_kb(proc.pid)
            hog.setblocking(False)
            sent, chunk, deadline, stuck_since = 0, line * 1000, time.monotonic() + 60, None
            while time.monotonic() < deadline and sent < (512 << 20):
                try:
                    sent += hog.send(chunk)
                    stuck_since = None
                except BlockingIOError:  # the server stopped reading it: its answers wait for it to read
                    stuck_since = stuck_since or time.monotonic()
                    if time.monotonic() - stuck_since > 1.5:
                        break
                    time.sleep(0.01)
                    assert exchange(other, [line.strip()]) == want
            grown_mb = (vm_rss_kb(proc.pid) - before) / 1024
            assert sent < (64 << 20), f"{sent >> 20} MiB taken from a client that never reads"
            assert grown_mb < 64, grown_mb
            assert exchange(other, [line.strip()] * 5) == want * 5


def test_a_thousand_idle_connections_cost_nothing_to_a_busy_one():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2100:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1100:
        pytest.skip("this test process may not open 1,000 sockets")
    line = {"id": 1, "obs": [0.5] * 8}
    with server(EXAMPLES / "vector") as (proc, said):
        idle = []
        try:
            for _ in range(1000):
                idle.append(dial(said["listen"]))
            with dial(said["listen"]) as busy:
                t0 = time.perf_counter()
                got = [exchange(busy, [line])[0] for _ in range(200)]
                assert time.perf_counter() - t0 < 30
            assert exchange(idle[0], [line]) == got[:1] and exchange(idle[-1], [line]) == got[:1]
            assert all(g == got[0] for g in got) and proc.poll() is None
        finally:
            for sock in idle:
                sock.close()


def test_sigterm_answers_every_line_received_removes_its_socket_and_exits_0(tmp_path):
    path = tmp_path / "policy.sock"
    line = json.dumps({"id": 1, "obs": [0.25] * 59}).encode() + b"\n"
    proc, said = start(BUNDLED, f"unix:{path}", "--stream-stats")
    try:
        assert path.exists() and said["listen"] == f"unix:{path}"
        with dial(said["listen"]) as sock:
            sock.setblocking(False)
            sent, rest = 0, b""
            with contextlib.suppress(BlockingIOError):  # until the server stops reading it (answers unread)
                for _ in range(400):
                    rest = rest or line * 100
                    n = sock.send(rest)
                    sent, rest = sent + n, rest[n:]
                    time.sleep(0.002)
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            sock.setblocking(True)
            sock.settimeout(60)
            data = bytearray()
            while True:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        answers = data.splitlines()
        assert len(answers) == sent // len(line)  # (a line sent in part waits for its end: not a line yet)
        assert answers and all(a == answers[0] for a in answers) and b"error" not in answers[0]
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read().decode()
        assert "Traceback" not in err and f"lines={len(answers)} errors=0" in err
        assert not path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def http(url: str, body: bytes = None) -> tuple:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_http_healthz_metrics_and_v1_act_answer_as_the_stream(capsys):
    pytest.importorskip("aiohttp")
    pytest.importorskip("prometheus_client")
    model = EXAMPLES / "hybrid"
    lines = lines_for(model, 12)
    with local_server(model, "127.0.0.1:0", "--http", "127.0.0.1:0") as (_, said):
        base = f"http://{said['http']}"
        assert base.startswith("http://127.0.0.1:")
        assert http(base + "/healthz") == (200, b"ok\n")
        with dial(said["listen"]) as sock:
            by_socket = exchange(sock, lines)
        by_http = [
            http(base + "/v1/act", line if isinstance(line, bytes) else json.dumps(line).encode()) for line in lines
        ]
        status, text = http(base + "/metrics")
    want = stream(capsys, model, lines)
    assert by_socket == want and [json.loads(body) for _, body in by_http] == want
    assert [code for code, _ in by_http] == [400 if "error" in a else 200 for a in want]
    metrics = text.decode()
    assert status == 200 and f"mlagents_serve_lines_total {2.0 * len(lines)}" in metrics
    errors = sum("error" in a for a in want)
    assert f"mlagents_serve_error_answers_total {2.0 * errors}" in metrics
    assert "mlagents_serve_connections_total 1.0" in metrics and "mlagents_serve_latency_seconds_bucket" in metrics
    assert "mlagents_serve_batch_lines_count" in metrics


@pytest.mark.parametrize(
    "value, says",
    [
        ("127.0.0.1", "expected HOST:PORT"),
        ("127.0.0.1:70000", "from 0 to 65535"),
        ("127.0.0.1:-1", "from 0 to 65535"),
        ("unix:", "needs a socket path"),
        ("BUSY", "address already in use"),
        ("FILE", "is not a socket"),
        (None, "needs --listen"),
    ],
)
def test_bad_listen_values_exit_2_in_one_line(capfd, tmp_path, value, says):
    """(In this process; capfd: what a native library would write on stderr counts too.)"""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    (tmp_path / "file").write_text("keep me")
    value = {"BUSY": f"127.0.0.1:{holder.getsockname()[1]}", "FILE": f"unix:{tmp_path / 'file'}"}.get(value, value)
    try:
        listen = ["--listen", value] if value else []
        result = run(capfd, "--mode", "serve", "--model-dir", EXAMPLES / "vector", *listen)
    finally:
        holder.close()
    refused(result, says)
    assert (tmp_path / "file").read_text() == "keep me"


def test_http_without_aiohttp_says_what_to_install_and_listen_alone_needs_none(tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nfor name in ('aiohttp', 'prometheus_client', 'grpc', 'tritonclient'):\n"
        "    sys.modules[name] = None\n"
    )
    env = child_env(PYTHONPATH=str(blocker))
    for option, needs in (("--http", "aiohttp and prometheus-client"), ("--grpc", "grpcio and tritonclient[grpc]")):
        r = subprocess.run(
            [sys.executable, str(ROOT / "inference.py"), "--mode", "serve", "--model-dir", str(EXAMPLES / "vector")]
            + [option, "127.0.0.1:0"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert needs in r.stderr and 'pip install ".[serve]"' in r.stderr, r.stderr
    with server(EXAMPLES / "vector", env=env) as (_, said), dial(said["listen"]) as sock:
        assert "continuous_actions" in exchange(sock, [{"obs": [0.5] * 8}])[0]


# -- inference.connect()
def same(a, b) -> None:
    """a (connect()'s) is b (load()'s): the same type (a dict may be connect()'s Answer, a dict that also says which
    model and version answered), the same keys, the same arrays bit for bit."""
    assert (
        type(a) is type(b)
        or (type(b) is dict and type(a).__name__ == "Answer" and isinstance(a, dict))
        or {type(a).__name__, type(b).__name__} <= {"ActionTuple", "Actions"}
    )
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
    elif hasattr(a, "continuous"):
        same(a.continuous, b.continuous)
        same(a.discrete, b.discrete)
    else:
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), (a, b)


def refusal(call) -> str:
    with pytest.raises(I.UsageError) as exc:
        call()
    return str(exc.value)


@pytest.mark.parametrize("name", ["vector", "lstm", "hybrid"])
def test_connect_answers_as_load_does(name):
    model = EXAMPLES / name
    local, g, rng = I.load(model), spec_of(model), np.random.RandomState(0)
    shapes, branches = [tuple(o["shape"]) for o in g["observations"]], g["discrete_branches"]
    with local_server(model) as (_, said), I.connect(said["listen"]) as remote:
        assert remote.info == json.loads(json.dumps(local.info))
        for rows in (None, 1, 5, 0):
            obs = [observation(rng, shape, rows or 1) for shape in shapes]
            obs = obs if rows is not None else [o[0] for o in obs]
            one = obs[0] if len(obs) == 1 else obs
            same(remote.act(one), local.act(one))
            if branches and rows:
                masks = (rng.rand(rows, sum(branches)) < 0.7).astype(np.float32)
                masks[:, 0] = 1
                same(remote.act(one, action_masks=masks), local.act(one, action_masks=masks))
            if g.get("memory_size") or local.settings.memory_size:
                memory = rng.randn(rows or 1, local.settings.memory_size).astype(np.float32)
                memory = memory if rows is not None else memory[0]
                if rows != 0:
                    same(remote.act(one, memory=memory), local.act(one, memory=memory))
        same(
            remote.act(one, deterministic=False, seed=7) if rows else remote.act(obs[0] if len(obs) == 1 else obs),
            local.act(one, deterministic=False, seed=7) if rows else local.act(obs[0] if len(obs) == 1 else obs),
        )
        # get_action over a rollout: agents come, end (terminal steps), and are reset
        spec = behavior_spec(model)
        assert remote.check_spec(spec) is None and local.check_spec(spec) is None
        alive = [0, 1, 2]
        for step in range(12):
            ended = [alive[0]] if step % 4 == 3 else []
            obs = [observation(rng, shape, len(alive)) for shape in shapes]
            mask = mlagents_mask(rng, len(alive), branches)
            d, t = decision_steps(obs, alive, mask), terminal_steps([o[: len(ended)] for o in obs], ended)
            same(remote.get_action(d, t), local.get_action(d, t))
            if step == 6:
                remote.reset([1])
                local.reset([1])
            if step == 9:
                remote.reset()
                local.reset()
            alive = alive[1:] + [max(alive) + 1] if step % 5 == 4 else alive
        # the same refusals
        bad_spec = type(spec)(spec.observation_specs[:0], spec.action_spec)
        assert refusal(lambda: remote.check_spec(bad_spec)) == refusal(lambda: local.check_spec(bad_spec))
        assert refusal(lambda: remote.act(np.zeros(3, np.float32))) == refusal(
            lambda: local.act(np.zeros(3, np.float32))
        )
        assert refusal(lambda: remote.get_action(decision_steps(obs, [4, 4, 5], mask))) == refusal(
            lambda: local.get_action(decision_steps(obs, [4, 4, 5], mask))
        )
        assert refusal(lambda: remote.act(one, deterministic="yes")) == refusal(
            lambda: local.act(one, deterministic="yes")
        )


def test_connect_errors_are_one_line_usage_errors(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert "nothing listens there" in refusal(lambda: I.connect(f"127.0.0.1:{port}"))
    assert "nothing listens there" in refusal(lambda: I.connect(f"unix:{tmp_path / 'none.sock'}"))
    assert "expected HOST:PORT" in refusal(lambda: I.connect("localhost"))
    proc, said = start(EXAMPLES / "vector")
    try:
        remote = I.connect(said["listen"])
        assert "holds nan" in refusal(lambda: remote.act(np.full(8, np.nan, np.float32)))
        proc.kill()
        proc.wait()
        message = refusal(lambda: remote.act(np.zeros(8, np.float32)))
        assert "\n" not in message and said["listen"] in message
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_connect_imports_no_torch():
    code = (
        "import sys; sys.modules['torch'] = None; import inference; from mlagents_inference.fronts import remote; "
        "print(inference.connect is remote.connect)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr


@pytest.mark.skipif(not REAL_MLAGENTS, reason="mlagents_envs is not installed (CI's second leg has it)")
def test_connect_get_action_gives_mlagents_action_tuples():
    from mlagents_envs.base_env import ActionTuple

    model = EXAMPLES / "hybrid"
    local, rng = I.load(model), np.random.RandomState(3)
    with local_server(model) as (_, said), I.connect(said["listen"]) as remote:
        obs = [observation(rng, (12,), 4)]
        d = decision_steps(obs, [3, 4, 5, 6], mlagents_mask(rng, 4, [2]))
        got = remote.get_action(d)
        assert isinstance(got, ActionTuple)
        same(got, local.get_action(d))


def test_sigint_drains_the_same_way_then_exits_130_as_every_mode():
    with server(EXAMPLES / "vector") as (proc, said), dial(said["listen"]) as sock:
        want = exchange(sock, [{"id": 1, "obs": [0.5] * 8}])
        sock.sendall(json.dumps({"id": 1, "obs": [0.5] * 8}).encode() + b"\n")
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        assert read_lines(sock, 1) == want and sock.recv(1) == b""
        assert proc.wait(timeout=60) == 130
        assert proc.stderr.read().decode().strip().splitlines()[-1] == "interrupted"
