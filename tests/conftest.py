"""Shared helpers. Every policy kind is in the repository: examples/ (one run folder per kind, written by
ML-Agents 1.1.0; examples/trained/, three policies Unity trained, older ONNX interface) and the bundled Huggy
sample under assets/. The larger development fixtures outside the repository ($HUGGY_FIXTURES, default
../shared/fixtures beside the checkout) are optional: tests that use them run only where they are present."""

import contextlib
import importlib.util
import io
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import inference  # noqa: E402

FIXTURES = Path(os.environ.get("HUGGY_FIXTURES") or ROOT.parent / "shared" / "fixtures")
BUNDLED = ROOT / "assets" / "ppo-Huggy-sample"
EXAMPLES = ROOT / "examples"  # one run folder per policy kind, written by ML-Agents 1.1.0 (tools/mlagents_fixtures.py)
TRAINED = EXAMPLES / "trained"  # Unity's trained 3DBallHard, DungeonEscape, SoccerTwos (examples/trained/README.md)
AGENT = EXAMPLES / "vector"  # one unnormalised vector input, two checkpoints (50000, 100000)
BUNDLED_PT = BUNDLED / "Huggy" / "Huggy-600017.pt"
BUNDLED_ONNX = BUNDLED / "Huggy" / "Huggy-600017.onnx"


# The files whose tests take longest (`pytest --durations=0`, summed per file), longest first: on xdist's workers they
# start first, so that the run does not end with one worker on a long file while the others wait. The rest follow, the
# files with most tests first (xdist's own order).
LONGEST_FILES = (
    "test_parquet.py",  # a million rows in eight files
    "test_scale.py",  # a million rows from one .npy
    "test_signals_and_stdio.py",
    "test_serve.py",
    "test_serve_floods.py",
    "test_readme.py",
    "test_install.py",
    "test_files_and_outputs.py",
    "test_onnx_only.py",
    "test_architecture.py",
    "test_torch_free.py",
    "test_kinds_cli.py",
    "test_kinds.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Where pytest-xdist is installed (requirements.txt), the command line does not say -n and the tests are
    pytest.ini's selection (-m "not ray and not v2clients"): one worker per CPU, a file's tests on one worker, in
    order (`-n auto --dist loadfile`: a module's fixtures are made once), the files in pytest_collection_modifyitems'
    order. `-n 0` runs them in this one process, as where xdist is absent (CI's torch-free leg) and as the Ray group
    runs (-m ray: each file starts Ray nodes)."""
    if (
        getattr(config.option, "numprocesses", 0) is None
        and not hasattr(config, "workerinput")
        and config.option.markexpr == "not ray and not v2clients"
    ):
        config.option.numprocesses = "auto"
        if config.option.dist == "no":
            config.option.dist = "loadfile"
            config.option.loadscopereorder = False  # (pytest-xdist 3.8: the order below, not by number of tests)


def pytest_collection_modifyitems(config, items):
    """On xdist's workers: LONGEST_FILES first, then the other files by their number of tests; a file's own tests
    keep their order."""
    if not hasattr(config, "workerinput"):
        return
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.path.name, []).append(item)
    rank = {name: k for k, name in enumerate(LONGEST_FILES)}
    order = sorted(files, key=lambda name: (rank.get(name, len(rank)), -len(files[name])))
    items[:] = [item for name in order for item in files[name]]


def pytest_configure(config):
    """On xdist's workers, torch's intra-op threads are one per worker: the workers are as many as the CPUs, and
    more threads than CPUs spin-waiting for each other stall (see one_torch_thread below)."""
    if hasattr(config, "workerinput") and importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(1)


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"fixture {path} is absent (set HUGGY_FIXTURES)")
    return path


@pytest.fixture(autouse=True)
def offline_env(monkeypatch):
    """No test reaches for the Hub; HUGGY_MODEL_DIR from the caller's shell does not leak in."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HUGGY_MODEL_DIR", raising=False)


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HUGGY_MODEL_DIR"}
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env


def cli(*args, input=None, timeout=300, env=None, cwd=None) -> subprocess.CompletedProcess:
    """Run inference.py as a user would, in a fresh process."""
    return subprocess.run(
        [sys.executable, str(ROOT / "inference.py"), *map(str, args)],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or child_env(),
        cwd=cwd,
    )


def serve_process(
    *args, program: Path = ROOT / "inference.py", env=None, timeout: float = 120, says: str = "listening", cwd=None
) -> tuple:
    """`program --mode serve ARGS` (inference.py unless told) in a process of its own, stdin and stdout closed, stderr
    piped and read up to its start-up line "[serve] ... listening on ADDRESS ..." (`says`: "http", "grpc" for those
    fronts' lines): (the process, ADDRESS, what stderr said so far). A process that ends first, or says nothing in
    `timeout` s, fails the test and is killed; the caller stops the one returned. `cwd`: its working folder."""
    proc = subprocess.Popen(
        [sys.executable, str(program), "--mode", "serve", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env or child_env(),
    )
    text, deadline = b"", time.monotonic() + timeout
    try:
        while not (found := re.search(says.encode() + rb" on (\S+)[^\n]*\n", text)):
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, (proc.poll(), text.decode(errors="replace")[-3000:])
            if select.select([proc.stderr], [], [], min(left, 1.0))[0]:
                text += os.read(proc.stderr.fileno(), 4096)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, found.group(1).decode(), text.decode(errors="replace")


def rss_mb(pid: int) -> float:
    """A process's resident memory (MB), from /proc/PID/status (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024


def child_pids(pid: int) -> list:
    """The pids of a process's children (/proc/PID/task/*/children): serve's gRPC process, say."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    return found


def family_rss_mb(pid: int) -> float:
    """A process's resident memory and its children's (MB): serve's and its gRPC process's (--grpc-process on)."""
    total = 0.0
    for each in [pid, *child_pids(pid)]:
        with contextlib.suppress(FileNotFoundError, AttributeError):
            total += rss_mb(each)
    return total


HANDLED_SIGNALS = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)]


@contextlib.contextmanager
def process_state_kept():
    """Puts back what a command run in this process may change in it: the working folder, the environment, sys.argv,
    sys.stdin/stdout/stderr, the signal handlers (main() installs its own while it runs), the umask, the warnings
    filters and torch's thread count. A test of main()'s own clean-up calls inference.main directly."""
    cwd, env, argv = os.getcwd(), dict(os.environ), list(sys.argv)
    streams = sys.stdin, sys.stdout, sys.stderr
    handlers = {signum: signal.getsignal(signum) for signum in HANDLED_SIGNALS}
    umask = os.umask(0o022)
    os.umask(umask)
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    try:
        with warnings.catch_warnings():
            yield
    finally:
        os.chdir(cwd)
        if dict(os.environ) != env:
            os.environ.clear()
            os.environ.update(env)
        sys.argv[:] = argv
        sys.stdin, sys.stdout, sys.stderr = streams
        for signum, handler in handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        os.umask(umask)
        if threads is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def run(capsys, *args, stdin=None) -> tuple:
    """The command line run in this process, as typed (inference.main([...])): (exit code, stdout, stderr).
    `stdin`: text or bytes given as standard input (stream mode)."""
    capsys.readouterr()  # (what earlier calls left is not this call's)
    with process_state_kept():
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else stdin
            sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        code = inference.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def call(capsys, *args):
    """run() with --json: (exit code, the parsed JSON result or None, stderr)."""
    code, out, err = run(capsys, *args, "--json")
    lines = [l for l in out.splitlines() if l.strip()]
    return code, (json.loads(lines[-1]) if lines and code in (0, 1) else None), err


def one_line(err: str, *words) -> str:
    """`err` is one line (blank lines aside), no traceback, holding each of `words`: that line."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    for word in words:
        assert word in err, (word, err[-3000:])
    return lines[0]


def refused(result, *words) -> str:
    """A one-line refusal: exit 2, exactly one non-empty line on stderr, no traceback, holding each of `words`.
    `result`: what run() or call() returned, or a finished process. Returns the line."""
    code, err = (result.returncode, result.stderr) if hasattr(result, "returncode") else (result[0], result[-1])
    assert code == 2, (code, err[-3000:])
    return one_line(err, *words)


def run_stream(policy, text: str, monkeypatch, max_line_bytes: int = 1 << 20) -> list:
    """Stream mode on an already loaded policy, in this process, every line of `text` already waiting (one read
    returns them all): the answer lines, as written."""
    from mlagents_inference.fronts.stream import mode_stream

    ctx = SimpleNamespace(
        policy=policy,
        engine_name=policy.engine_name,
        device=policy.device,
        args=SimpleNamespace(max_line_bytes=max_line_bytes, stream_stats=False),
    )
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8", "surrogatepass"))))
    monkeypatch.setattr(sys, "stdout", out)
    mode_stream(ctx)  # must not raise: the answers it wrote are what the callers check
    return out.getvalue().splitlines()


def random_memories(rng: np.random.RandomState, rows: int, size: int) -> np.ndarray:
    """LSTM memories as a running policy has them: h in (-1, 1), c wider. [rows, size] float32."""
    half = size // 2
    return np.concatenate([rng.uniform(-1, 1, (rows, half)), rng.randn(rows, half) * 2], 1).astype(np.float32)


def huggy_obs(rows: int, seed: int = 0) -> np.ndarray:
    """Observations for the bundled sample (59 wide), spread wider than a unit normal: [rows, 59] float32."""
    return (np.random.RandomState(seed).randn(rows, 59) * 2).astype(np.float32)


def fixed(values: np.ndarray, dtype=np.float32):
    """[rows, ...] as a Parquet fixed_size_list column (pyarrow), each row flattened (C-order: channel first), as
    `dtype` (None: the array's own, e.g. uint8 camera frames or int64 masks)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype).reshape(len(values), int(np.prod(values.shape[1:])))
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def copy_run(src: Path, tmp_path: Path, name: str = "run") -> Path:
    """A writable copy of a run folder (examples/..., the bundled sample) under tmp_path."""
    import shutil

    return Path(shutil.copytree(src, tmp_path / name))


def write_checkpoint(run: Path, behavior: str, step: int, source: Path, scale=None, onnx: Path = None, listed=True):
    """<behavior>-<step>.pt with the tensors of `source` (the head's weights times `scale`), the ONNX `onnx` copied
    beside it, then the step listed in run_logs/training_status.json (ML-Agents' record), in that order."""
    import torch

    obj = torch.load(source, map_location="cpu", weights_only=True)
    if scale is not None:
        key = next(k for k in obj["Policy"] if k.endswith(("mu.weight", "branches.0.weight")))
        obj["Policy"][key] = obj["Policy"][key] * scale
    obj["global_step"] = {"_GlobalSteps__global_step": torch.tensor([step])}
    path = run / behavior / f"{behavior}-{step}.pt"
    torch.save(obj, path)
    if onnx is not None:
        shutil.copyfile(onnx, path.with_suffix(".onnx"))
    if listed:
        list_checkpoint(run, behavior, step)
    return path


def list_checkpoint(run: Path, behavior: str, step: int) -> None:
    status_file = run / "run_logs" / "training_status.json"
    status = json.loads(status_file.read_text()) if status_file.exists() else {}
    records = status.setdefault(behavior, {}).setdefault("checkpoints", [])
    base = f"results/{run.name}/{behavior}/{behavior}-{step}"
    records.append(
        {
            "steps": step,
            "file_path": base + ".onnx",
            "reward": None,
            "creation_time": time.time(),
            "auxillary_file_paths": [base + ".pt"],
        }
    )
    status_file.parent.mkdir(exist_ok=True)
    status_file.write_text(json.dumps(status, indent=4))


def two_behaviour_run(tmp_path: Path, name: str = "two") -> Path:
    """A run folder of two behaviours, as mlagents-learn leaves one that trained two (a striker and a goalie, say):
    examples/vector's Vector (50000 with its ONNX, 100000 final) and examples/hybrid's Hybrid (40000 final), their
    records merged into one run_logs/training_status.json."""
    return add_hybrid(copy_run(EXAMPLES / "vector", tmp_path, name))


def add_hybrid(run: Path) -> Path:
    """examples/hybrid's Hybrid added to a run folder, as mlagents-learn writes a behaviour: its files first, then
    its record in run_logs/training_status.json."""
    import shutil

    shutil.copytree(EXAMPLES / "hybrid" / "Hybrid", run / "Hybrid")
    shutil.copyfile(EXAMPLES / "hybrid" / "Hybrid.onnx", run / "Hybrid.onnx")
    status_file = run / "run_logs" / "training_status.json"
    status = json.loads(status_file.read_text())
    status["Hybrid"] = json.loads((EXAMPLES / "hybrid" / "run_logs" / "training_status.json").read_text())["Hybrid"]
    status_file.write_text(json.dumps(status, indent=4))
    return run


def leftovers(folder) -> list:
    """The temporary files an interrupted or failed write would leave (".<name>.<random>.tmp<suffix>"), anywhere
    under `folder`."""
    return sorted(p.name for p in Path(folder).rglob(".*") if ".tmp" in p.name)


def strict(text: str):
    """A stream answer read as strict JSON (NaN, Infinity refused)."""

    def refuse(constant):
        raise ValueError(f"non-strict JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def ort_deterministic(onnx_path, obs) -> np.ndarray:
    """ML-Agents' own ONNX through a bare onnxruntime session: the reference."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return session.run(["deterministic_continuous_actions"], {"obs_0": np.asarray(obs, np.float32)})[0]


def ort_mu(onnx_path, obs) -> np.ndarray:
    """mu read out of ML-Agents' own ONNX (its mu Gemm made a graph output)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(onnx_path))
    name = next(n.output[0] for n in model.graph.node if n.op_type == "Gemm" and "mu" in n.output[0])
    model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run([name], {"obs_0": np.asarray(obs, np.float32)})[0]


@pytest.fixture(scope="module")
def one_torch_thread():
    """For modules whose batches are small (use: pytestmark = pytest.mark.usefixtures(...)): one intra-op thread is
    faster, and it does not stall when other work shares the CPUs (two threads spin-waiting on a loaded 2-core machine
    made an LSTM step 50x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- the C# client (clients/csharp): Mono's compiler, shared by test_csharp_client.py and test_unity_communicator.py

CSHARP_LANG_VERSION = "7.2"  # the newest mcs 6.8 knows; Unity's C# 7.3 takes it
MCS_FLAGS = ["-langversion:" + CSHARP_LANG_VERSION, "-warnaserror", "-warn:4", "-nologo", "-optimize+"]


def mono_tools(env=os.environ, which=shutil.which):
    """(mcs, mono) paths; else ("skip" or "fail", why): a developer's machine skips, CI (env CI set) fails."""
    mcs, mono = which("mcs"), which("mono")
    if mcs and mono:
        return mcs, mono
    missing = " and ".join(name for name, path in (("mcs", mcs), ("mono", mono)) if not path)
    why = f"{missing} not found: the C# client needs Mono (Debian: apt-get install mono-mcs mono-runtime)"
    return ("fail" if env.get("CI") else "skip"), why


def mono_or_skip() -> tuple:
    """(mcs, mono) for a fixture: skipped where Mono is missing, failed where CI is set (.ci/run installs it)."""
    tools = mono_tools()
    if tools[0] == "skip":
        pytest.skip(tools[1])
    if tools[0] == "fail":
        pytest.fail(tools[1] + " (CI is set: .ci/run installs it)")
    return tools


def compile_cs(mcs: str, out: Path, sources: list, *extra) -> str:
    r = subprocess.run(
        [mcs, *MCS_FLAGS, *extra, f"-out:{out}", *map(str, sources)], capture_output=True, text=True, timeout=300
    )
    said = (r.stdout + r.stderr).strip()
    assert r.returncode == 0 and out.exists(), f"mcs failed on {[Path(s).name for s in sources]}:\n{said}"
    return said


# -- a serve in this process, and its JSON lines over a socket (test_serve, test_serve_v2, test_csharp_client)


@contextlib.contextmanager
def local_server(model=EXAMPLES / "vector", listen="127.0.0.1:0", *extra):
    """The server in this process, on the policy and options the command line would give it: (None, said)."""
    from mlagents_inference.fronts.cli import parse_args
    from mlagents_inference.fronts.serve import serving
    from mlagents_inference.services.batcher import ServeOptions
    from mlagents_inference.services.context import Context

    args = parse_args(["--mode", "serve", "--model-dir", str(model), *extra] + (["--listen", listen] if listen else []))
    given = {dest: getattr(args, dest) for dest in ("listen", "http", "grpc") if getattr(args, dest) is not None}
    addresses = {dest: texts[0] if len(texts) == 1 else texts for dest, texts in given.items()}
    with serving(Context(args).policy, ServeOptions.from_args(args), **addresses) as said:
        yield None, said


def dial(where: str, timeout: float = 60.0) -> socket.socket:
    if where.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(timeout)
        sock.connect(where[5:])
        return sock
    host, port = where.rsplit(":", 1)
    assert host == "127.0.0.1"
    return socket.create_connection((host, int(port)), timeout=timeout)


def read_lines(sock: socket.socket, n: int, buf: bytearray = None) -> list:
    buf = bytearray() if buf is None else buf
    out = []
    while len(out) < n:
        chunk = sock.recv(1 << 16)
        assert chunk, f"connection closed after {len(out)} of {n} answers"
        buf += chunk
        while b"\n" in buf and len(out) < n:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            out.append(json.loads(line))
    return out


def exchange(sock: socket.socket, lines: list) -> list:
    sock.sendall(b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines))
    return read_lines(sock, len(lines))


def lines_received(conn: socket.socket, stop, reads: int, closed=None):
    """A stand-in server's reads of `conn` (its time-out short, 0.2 s say): after each read, the JSON lines it
    completed (a list, empty where none); at most `reads` reads, until `stop` (an Event) is set or the client closes
    (then `closed`, an Event, is set where given)."""
    buf = b""
    for _ in range(reads):
        if stop.is_set():
            return
        try:
            chunk = conn.recv(1 << 16)
        except socket.timeout:
            continue
        if not chunk:
            if closed is not None:
                closed.set()
            return
        *lines, buf = (buf + chunk).split(b"\n")
        yield [json.loads(line) for line in lines if line.strip()]


def sensor_inputs(path, rows: int, seed: int) -> dict:
    """Random observations for every sensor input of the file, by the rank its graph declares."""
    import onnx
    from mlagents_reference import entity_obs, image_obs, vector_obs

    rng, out = np.random.RandomState(seed), {}
    model = onnx.load(str(path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in weights or value.name in ("action_masks", "recurrent_in"):
            continue
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim][1:]
        out[value.name] = (
            vector_obs(rng, rows, shape[0])
            if len(shape) == 1
            else entity_obs(rng, rows, *shape)[0]
            if len(shape) == 2
            else image_obs(rng, rows, shape)
        )
    return out


def acts_as_the_file(policy, ref, ours_feed: dict, ref_obs: list, seed: int, sac: bool) -> None:
    """Deterministic actions (random masks) and a 3-step memory rollout against the file's own outputs."""
    from mlagents_reference import discrete_mismatches, max_err, max_rel_err, random_masks

    rng = np.random.RandomState(seed + 1)
    s = policy.settings
    rows = len(next(iter(ours_feed.values())))
    masks = random_masks(rng, rows, s.discrete_branches) if s.discrete_branches else None
    ours_mem = theirs_mem = random_memories(rng, rows, s.memory_size) if s.memory_size else None
    for step in range(3 if s.memory_size else 1):
        ours = policy.act(ours_feed, action_masks=masks, memory=ours_mem)
        theirs = ref.run(ref_obs, masks, theirs_mem)
        if "continuous" in theirs:
            assert (max_rel_err if sac else max_err)(ours["continuous_actions"], theirs["continuous"]) < 1e-5
        else:
            assert "continuous_actions" not in ours
        if "discrete" in theirs:
            assert [len(l[0]) for l in theirs["logits"]] == s.discrete_branches
            assert discrete_mismatches(ours["discrete_actions"], theirs)[0] == 0
        if "memory" in theirs:
            assert max_rel_err(ours["memory"], theirs["memory"]) < 3e-5
            ours_mem, theirs_mem = ours["memory"], theirs["memory"]


def wider_outputs(tmp_path: Path) -> Path:
    """The vector example's ONNX, its deterministic actions concatenated with themselves: [batch, 4]."""
    import onnx
    from onnx import helper

    model = onnx.load(str(EXAMPLES / "vector" / "Vector.onnx"))
    name = "deterministic_continuous_actions"
    for node in model.graph.node:
        node.output[:] = ["inner" if o == name else o for o in node.output]
    model.graph.node.append(helper.make_node("Concat", ["inner", "inner"], [name], axis=1))
    onnx.save(model, str(tmp_path / "wide.onnx"))
    return tmp_path / "wide.onnx"


@pytest.fixture()
def two_node_cluster():
    """A head and a worker Ray node on 127.0.0.1 (tests/ray_cluster.py), its address; stopped afterwards."""
    from ray_cluster import loopback_cluster

    with loopback_cluster() as address:
        yield address


def read_until_closed(fd: int, seconds: float = 120) -> bytes:
    """What a forked child writes into its end of a pipe, until it closes it (or `seconds` pass)."""
    report, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 1.0)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            report += chunk
    return report


def reap_or_kill(pid: int) -> None:
    """A forked child reaped within 120 s, or killed."""
    for _ in range(240):
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


@contextlib.contextmanager
def forked(child):
    """`child()` run in a forked child process while the block runs in this one: the child writes what child()
    returns (as JSON) into a pipe and leaves by os._exit (1 where child() raised), running nothing of pytest's. Yields
    a dict that holds, once the block ends, "report": the bytes the child wrote (b"" where it said nothing); the child
    is reaped (or killed) whatever the block does."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            os.write(write, json.dumps(child()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    said: dict = {}
    try:
        yield said
        said["report"] = read_until_closed(read)
    finally:
        os.close(read)
        reap_or_kill(pid)


def count_engine_calls(policy, monkeypatch) -> list:
    """The rows of each engine call the policy makes from now on (its engine's run wrapped for the test)."""
    calls, original = [], policy.engine.run

    def counted(flat, *args, **kwargs):
        calls.append(len(flat[0]))
        return original(flat, *args, **kwargs)

    monkeypatch.setattr(policy.engine, "run", counted)
    return calls
