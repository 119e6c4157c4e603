#!/usr/bin/env python3
"""serve's Open Inference Protocol (KServe V2) beside PyTriton's, both driven by Triton's perf_analyzer, on the bundled
Huggy (a benchmark, not a test; docs/serve.md). Needs the venv of tools/v2_tools.sh (perf_analyzer, PyTriton):

    bash tools/v2_tools.sh /work/v2venv
    /work/v2venv/bin/python tools/bench_v2.py [--quick] [--only pytriton|ours] [--repeat 3] [--json]
        [--before DIR] [--serve-python PYTHON] [--before-python PYTHON] [--perf-analyzer PATH]
        [--serve-args "OPTIONS"] [--before-args "OPTIONS"]

The servers, each up for the whole run on its own loopback ports, one loaded at a time:
  pytriton  PyTriton (Triton 2.41's server, its Python backend) with a @batch callable that runs onnxruntime on
            Huggy.onnx: model "Huggy", the ONNX's input and batched output names, dynamic batching, max batch
            --max-batch (256), queue delay --max-wait-us (0); onnxruntime: every graph optimisation, intra-op
            threads --ort-threads (default: the CPUs this process may use), inter-op 1, no thread spins;
  ours      python inference.py --mode serve --model-dir assets/ppo-Huggy-sample --http H --grpc G --spin off
            --max-batch (256) --max-wait-us (0). A serve that refuses --grpc is started without it and its gRPC
            cases are skipped; one without the V2 REST routes (GET /v2/health/ready 404) has its cases skipped.
  before    --before DIR: the same serve from another checkout (DIR/inference.py: a git worktree of the code
            before a change), measured in the same run, interleaved with the others.
serve runs under --serve-python (default: this Python), so that PyTriton's venv (numpy<2) need not be serve's; the
--before serve under --before-python (default: --serve-python): the same checkout under another venv (another grpcio,
an event loop of its own) is then measured beside it; --serve-args and --before-args add options to either serve's
command line (the same checkout with and without an option, measured side by side).
Before the cases, the same 64 rows go to every server over HTTP (JSON): their deterministic actions must agree
within 1e-5 (answers_max_abs_diff; the run ends with exit 1 where they do not).

The cases, each run for every server in turn (ABBA order over the repetitions; medians reported):
  grpc_b256_c1  gRPC, batch 256, concurrency 1: observations/s
  http_b256_c1  HTTP, batch 256, concurrency 1: observations/s
  grpc_c64      gRPC, batch 1, concurrency 64 (--async): observations/s, p99, rows per engine call
  http_c64      HTTP, batch 1, concurrency 64 (--async): observations/s, p99, rows per engine call
  grpc_c1       gRPC, batch 1, concurrency 1: p50
  http_c1       HTTP, batch 1, concurrency 1: p50
perf_analyzer's "Inferences/Second" already counts batch x requests, so it is the observations/s. Its inputs are
real floats (a --input-data JSON file of N(0,1) rows), not its default random bytes (NaNs among them). Rows per
engine call: the model statistics' inference_count over execution_count (GET /v2/models/Huggy/stats, Triton's and
serve's alike), their growth across the perf_analyzer run.

What perf_analyzer 2.41 asks of a server (seen in Triton's verbose log and through a logging proxy; no -x given):
  HTTP  GET /v2/models/Huggy, GET /v2/models/Huggy/config, GET /v2 (server metadata), then GET
        /v2/models/Huggy/stats before and after each measurement window only where GET /v2's "extensions" lists
        "statistics"; POST /v2/models/Huggy/infer with Triton's binary tensors (Inference-Header-Content-Length,
        inputs' "binary_data_size", every metadata output asked with "binary_data": true).
  gRPC  ModelMetadata, ModelConfig, ServerMetadata, ModelStatistics (as /stats), ModelInfer (unary, also with
        --async; raw_input_contents; parameter triton_enable_empty_final_response; every output requested).
Each of metadata, config and server metadata failing ends the run; config may be as small as {"name",
"max_batch_size"} (0 or none: no -b beyond 1). Statistics, where announced, must be complete (every count and ns of
success, queue, compute_input/infer/output, cache_hit/miss; HTTP reads them unchecked) and, with no -x, the queue
count must grow across a window or perf_analyzer stops: "failed to find the requested model version".
"""

import argparse
import csv
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["CASES", "main", "parse_perf_analyzer", "perf_analyzer_env", "pytriton_env"]

ROOT = Path(__file__).resolve().parents[1]
HUGGY = ROOT / "assets" / "ppo-Huggy-sample"
MODEL = "Huggy"

# name: (protocol, batch, concurrency, the metrics reported)
CASES = {
    "grpc_b256_c1": ("grpc", 256, 1, ("obs_per_s",)),
    "http_b256_c1": ("http", 256, 1, ("obs_per_s",)),
    "grpc_c64": ("grpc", 1, 64, ("obs_per_s", "p99_ms", "rows_per_call", "cpu_us_per_obs")),
    "http_c64": ("http", 1, 64, ("obs_per_s", "p99_ms", "rows_per_call", "cpu_us_per_obs")),
    "grpc_c1": ("grpc", 1, 1, ("p50_ms",)),
    "http_c1": ("http", 1, 1, ("p50_ms",)),
}
HIGHER_IS_BETTER = {"obs_per_s": True, "p50_ms": False, "p99_ms": False, "rows_per_call": True, "cpu_us_per_obs": False}
ONNX_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_status(url: str) -> Optional[int]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def onnx_io(path: Path) -> tuple:
    """The ONNX's graph inputs [(name, dtype, dims after the batch)] and its batched outputs (first dim symbolic):
    the constants (version_number, memory_size, ...) have no batch dimension, which Triton's batching needs."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initialisers = {i.name for i in graph.initializer}

    def dims(value) -> list:
        return [d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim]

    inputs = [
        (v.name, ONNX_TYPES[v.type.tensor_type.elem_type], dims(v)[1:])
        for v in graph.input
        if v.name not in initialisers
    ]
    outputs = [
        (v.name, ONNX_TYPES[v.type.tensor_type.elem_type], dims(v)[1:])
        for v in graph.output
        if v.type.tensor_type.shape.dim and not v.type.tensor_type.shape.dim[0].HasField("dim_value")
    ]
    return inputs, outputs


# ---- the PyTriton server (run as this file's --serve-pytriton child) ----


def serve_pytriton(a: argparse.Namespace) -> None:
    import onnxruntime as ort
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    path = HUGGY / f"{MODEL}.onnx"
    inputs, outputs = onnx_io(path)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = a.ort_threads or len(os.sched_getaffinity(0))
    options.inter_op_num_threads = 1  # (the sequential executor: no inter-op pool at work)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [name for name, _, _ in outputs]

    @batch
    def infer(**tensors):
        return dict(zip(names, session.run(names, tensors)))

    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=a.http_port,
        grpc_address="127.0.0.1",
        grpc_port=a.grpc_port,
        metrics_address="127.0.0.1",
        metrics_port=a.metrics_port,
        exit_on_error=True,
    )
    try:  # PyTriton >= 0.7 restricts the statistics perf_analyzer reads to a token of its own: none restricted here
        from pytriton.triton import TritonSecurityConfig

        security = {"security_config": TritonSecurityConfig(restricted_endpoints=[])}
    except ImportError:
        security = {}
    with Triton(config=config, **security) as triton:
        triton.bind(
            model_name=MODEL,
            infer_func=infer,
            inputs=[Tensor(name=n, dtype=t, shape=tuple(d)) for n, t, d in inputs],
            outputs=[Tensor(name=n, dtype=t, shape=tuple(d)) for n, t, d in outputs],
            config=ModelConfig(
                max_batch_size=a.max_batch, batcher=DynamicBatcher(max_queue_delay_microseconds=a.max_wait_us)
            ),
            strict=True,
        )
        triton.serve()


def pytriton_env() -> dict:
    """PyTriton's Python backend stub links libpython3.X.so.1.0 and finds the system's first (Debian's 3.11.2 in
    /usr/lib) while it imports this interpreter's standard library (pyenv's 3.11.7, say): the stub then fails in
    multiprocessing ('_thread.RLock' object has no attribute '_recursion_count'). This interpreter's own libpython
    first on LD_LIBRARY_PATH makes the two agree."""
    env = dict(os.environ)
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH")) if p)
    return env


# ---- the servers under test ----


class Server:
    def __init__(self, name: str, cmd: list, env: dict, ready_url: str):
        self.name, self.cmd, self.env, self.ready_url = name, cmd, env, ready_url
        self.log = tempfile.TemporaryFile()
        self.proc: Optional[subprocess.Popen] = None
        self.skip: dict = {}  # protocol ("grpc", "http", "all") -> why its cases are skipped
        self.ports: dict = {}

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.cmd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # (its own process group: PyTriton's tritonserver goes with it at stop())
        )

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def wait_ready(self, timeout: float, healthz: Optional[str] = None) -> Optional[str]:
        """None when ready_url answers 200; otherwise why not."""
        deadline, no_v2_since = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with {self.proc.returncode}: {self.output()[-1500:].strip()}"
            status = http_status(self.ready_url)
            if status == 200:
                return None
            if healthz and status == 404 and http_status(healthz) == 200:
                no_v2_since = no_v2_since or time.monotonic()
                if time.monotonic() - no_v2_since > 5:
                    return f"no V2 REST routes (GET {self.ready_url} answers 404, /healthz 200)"
            time.sleep(0.25)
        return f"not ready after {timeout:.0f} s"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout=30)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()


def start_pytriton(a: argparse.Namespace) -> Server:
    http, grpc, metrics = free_port(), free_port(), free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--serve-pytriton"]
    cmd += ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    cmd += ["--max-batch", str(a.max_batch), "--max-wait-us", str(a.max_wait_us), "--ort-threads", str(a.ort_threads)]
    server = Server("pytriton", cmd, pytriton_env(), f"http://127.0.0.1:{http}/v2/models/{MODEL}/ready")
    server.ports = {"http": http, "grpc": grpc}
    server.start()
    why = server.wait_ready(180)
    if why:
        server.stop()
        server.skip["all"] = f"PyTriton did not start: {why}"
    return server


def start_ours(a: argparse.Namespace, name: str = "ours") -> Server:
    inference = a.inference if name == "ours" else a.before / "inference.py"
    python = a.serve_python if name == "ours" else a.before_python or a.serve_python
    http, grpc = free_port(), free_port()
    base = [python, str(inference), "--mode", "serve", "--model-dir", str(HUGGY), "--spin", "off"]
    base += ["--max-batch", str(a.max_batch), "--max-wait-us", str(a.max_wait_us), "--http", f"127.0.0.1:{http}"]
    base += shlex.split(a.serve_args if name == "ours" else a.before_args)
    ready = f"http://127.0.0.1:{http}/v2/health/ready"
    healthz = f"http://127.0.0.1:{http}/healthz"
    env = dict(os.environ, PYTHONPATH=str(inference.parent))  # (its own checkout's package, not an installed one)
    server = Server(name, base + ["--grpc", f"127.0.0.1:{grpc}"], env, ready)
    server.ports = {"http": http, "grpc": grpc}
    server.start()
    why = server.wait_ready(120, healthz)
    if why and "--grpc" in why and ("unrecognized arguments" in why or "unknown" in why.lower()):
        server.skip["grpc"] = "serve refused --grpc (no gRPC front in this checkout): its gRPC cases skipped"
        server.cmd = base
        server.start()
        why = server.wait_ready(120, healthz)
    if why:
        server.stop()
        server.skip["all"] = f"serve: {why}"
    return server


# ---- perf_analyzer ----


def perf_analyzer_env() -> dict:
    """perf_analyzer links libcudart.so.12 even with no GPU in use: nvidia-cuda-runtime-cu12's lib folder first."""
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime as cudart

        lib = os.path.join(list(cudart.__path__)[0], "lib")
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    except ImportError:
        pass
    return env


def input_data(path: Path, rows: int = 64) -> None:
    inputs, _ = onnx_io(HUGGY / f"{MODEL}.onnx")
    rng = np.random.default_rng(0)
    data = []
    for _ in range(rows):
        entry = {}
        for name, dtype, dims in inputs:
            shape = [d if d > 0 else 1 for d in dims]
            values = np.ones(shape, dtype) if name == "action_masks" else rng.standard_normal(shape).astype(dtype)
            entry[name] = {"content": values.ravel().tolist(), "shape": shape}
        data.append(entry)
    path.write_text(json.dumps({"data": data}))


def parse_perf_analyzer(csv_text: str, stdout: str) -> dict:
    """perf_analyzer's -f CSV (Inferences/Second and p50..p99 latency in usec), its stdout for what the CSV lacks
    or when it wrote none: {"obs_per_s", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "avg_ms", "client_overhead_pct"}."""
    out: dict = {}
    rows = list(csv.DictReader(line for line in csv_text.splitlines() if line.strip()))
    if rows:
        row = {k.strip().lower(): v for k, v in rows[-1].items() if k}
        if row.get("inferences/second"):
            out["obs_per_s"] = float(row["inferences/second"])
        for p in ("p50", "p90", "p95", "p99"):
            if row.get(f"{p} latency"):
                out[f"{p}_ms"] = float(row[f"{p} latency"]) / 1e3
        if row.get("avg latency"):
            out["avg_ms"] = float(row["avg latency"]) / 1e3
    client = stdout.split("Client:", 1)[-1].split("Server:", 1)[0] if "Client:" in stdout else ""
    if "obs_per_s" not in out and (m := re.search(r"Throughput:\s*([\d.]+)\s*infer/sec", client)):
        out["obs_per_s"] = float(m.group(1))
    for p in ("p50", "p90", "p95", "p99"):
        if f"{p}_ms" not in out and (m := re.search(rf"{p} latency:\s*(\d+)\s*usec", client)):
            out[f"{p}_ms"] = int(m.group(1)) / 1e3
    if m := re.search(r"Avg client overhead:\s*([\d.]+)%", client):
        out["client_overhead_pct"] = float(m.group(1))
    return out


def cpu_seconds(server: Server) -> float:
    """The CPU time (user + system) of the server's processes so far: every process of its session (PyTriton's
    tritonserver and Python stubs with it) and every descendant (serve's gRPC process, in a session of its own), read
    from /proc."""
    ticks, procs = os.sysconf("SC_CLK_TCK"), {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        procs[int(entry.name)] = (int(fields[1]), int(fields[3]), int(fields[11]) + int(fields[12]))

    def ours(pid: int) -> bool:
        seen = set()
        while pid in procs and pid not in seen:
            seen.add(pid)
            parent, session, _ = procs[pid]
            if pid == server.proc.pid or session == server.proc.pid:  # (start_new_session made it its leader)
                return True
            pid = parent
        return False

    return sum(ticks_used for pid, (_, _, ticks_used) in procs.items() if ours(pid)) / ticks


def engine_counts(server: Server) -> Optional[tuple]:
    """(inference_count, execution_count) of the model's statistics (rows answered, engine calls), or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['http']}/v2/models/{MODEL}/stats", timeout=5) as r:
            stats = json.loads(r.read())["model_stats"][0]
        return int(stats["inference_count"]), int(stats["execution_count"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def run_case(a: argparse.Namespace, server: Server, case: str, workdir: Path) -> dict:
    """One perf_analyzer run; one more with windows twice as long where it found no stable measurement (a loaded
    machine). Where the case reports them, the rows per engine call across the run and the server's CPU time per
    observation answered (its processes' user + system time over the statistics' inference_count)."""
    before, cpu = engine_counts(server), cpu_seconds(server)
    result = run_perf_analyzer(a, server, case, workdir, a.interval)
    if "stable measurement" in result.get("error", ""):
        result = run_perf_analyzer(a, server, case, workdir, 2 * a.interval)
    after, cpu = engine_counts(server), cpu_seconds(server) - cpu
    if "rows_per_call" in CASES[case][3] and before and after and after[1] > before[1]:
        result["rows_per_call"] = (after[0] - before[0]) / (after[1] - before[1])
        result["cpu_us_per_obs"] = cpu / (after[0] - before[0]) * 1e6
    return result


def check_answers(servers: dict, workdir: Path) -> dict:
    """The data file's rows (one request, JSON over HTTP) sent to every server: {"max_abs_diff": the largest
    difference of any deterministic output from the first server's, "outputs": the names compared}."""
    rows = json.loads((workdir / "data.json").read_text())["data"]
    inputs = []
    for name in rows[0]:
        shape = [len(rows), *rows[0][name]["shape"]]
        data = [v for row in rows for v in row[name]["content"]]
        inputs.append({"name": name, "datatype": "FP32", "shape": shape, "data": data})
    _, outputs = onnx_io(HUGGY / f"{MODEL}.onnx")
    wanted = [n for n, _, _ in outputs if n.startswith("deterministic")]
    body = json.dumps({"inputs": inputs, "outputs": [{"name": n} for n in wanted]}).encode()
    got = {}
    for name, server in servers.items():
        if "all" in server.skip:
            continue
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.ports['http']}/v2/models/{MODEL}/infer",
            body,
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            answer = json.loads(r.read())
        got[name] = {o["name"]: np.asarray(o["data"], np.float64) for o in answer["outputs"]}
    first = next(iter(got.values()), {})
    diff = max(
        (float(np.abs(out[n] - first[n]).max()) for out in got.values() for n in wanted),
        default=float("nan"),
    )
    return {"servers": list(got), "outputs": wanted, "max_abs_diff": diff}


def run_perf_analyzer(a: argparse.Namespace, server: Server, case: str, workdir: Path, interval: int) -> dict:
    protocol, batch, concurrency, _ = CASES[case]
    csv_path = workdir / f"{server.name}_{case}.csv"
    csv_path.unlink(missing_ok=True)
    cmd = [a.perf_analyzer, "-m", MODEL, "-u", f"127.0.0.1:{server.ports[protocol]}", "-i", protocol]
    cmd += ["-b", str(batch), "--concurrency-range", str(concurrency), "--measurement-interval", str(interval)]
    cmd += ["--input-data", str(workdir / "data.json"), "-f", str(csv_path), "--max-threads", str(a.max_threads)]
    cmd += ["--stability-percentage", str(a.stability), "--max-trials", str(a.max_trials)]
    cmd += ["--async"] if concurrency > 1 else []  # (sync: one request in flight per thread, --max-threads of them)
    try:
        done = subprocess.run(
            cmd,
            env=perf_analyzer_env(),
            capture_output=True,
            text=True,
            timeout=interval / 1e3 * (a.max_trials + 4) + 60,
        )
    except subprocess.TimeoutExpired:
        return {"error": "perf_analyzer timed out"}
    result = parse_perf_analyzer(csv_path.read_text() if csv_path.exists() else "", done.stdout)
    if done.returncode != 0 or "obs_per_s" not in result:
        tail = [line for line in (done.stdout + done.stderr).strip().splitlines() if "WARNING" not in line][-2:]
        result["error"] = f"perf_analyzer exit {done.returncode}: {' | '.join(tail)}"
    return result


# ---- main ----


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for name in ("tritonclient", "nvidia-pytriton", "onnxruntime", "numpy"):
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:
            out[name] = None
    return out


def commit_of(checkout: Path) -> Optional[str]:
    """The checkout's commit (short), "+" where its files differ from it; None outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "-uno"], capture_output=True, text=True
        )
    except OSError:
        return None
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "") if head.returncode == 0 else None


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1 s measurement windows, one repetition")
    p.add_argument("--only", choices=("pytriton", "ours"), help="measure one server only")
    p.add_argument("--before", type=Path, help="a checkout of the code before (a git worktree): its serve measured too")
    p.add_argument("--serve-python", default=sys.executable, help="the Python serve runs under (default: this one)")
    p.add_argument("--before-python", help="the Python the --before serve runs under (default: --serve-python)")
    p.add_argument("--serve-args", default="", help="more options for serve (one string: '--threads 1')")
    p.add_argument("--before-args", default="", help="more options for the --before serve (default: none)")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--repeat", type=int, help="each case this many times per server, ABBA order (default 3; --quick 1)")
    p.add_argument("--interval", type=int, help="perf_analyzer --measurement-interval, ms (default 3000; --quick 1000)")
    p.add_argument("--stability", type=int, default=20, help="perf_analyzer --stability-percentage (default 20)")
    p.add_argument("--max-trials", type=int, default=8, help="perf_analyzer --max-trials (default 8)")
    p.add_argument("--max-threads", type=int, default=4, help="perf_analyzer --max-threads (default 4)")
    p.add_argument("--max-batch", type=int, default=256, help="both servers' largest batch (default 256)")
    p.add_argument("--max-wait-us", type=int, default=0, help="both servers' batching delay (default 0)")
    p.add_argument("--ort-threads", type=int, default=0, help="PyTriton's onnxruntime intra-op threads (0: the CPUs)")
    p.add_argument("--perf-analyzer", help="perf_analyzer's path (default: beside this Python, else on PATH)")
    p.add_argument("--inference", type=Path, default=ROOT / "inference.py", help="the inference.py serve runs from")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--serve-pytriton", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--http-port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--grpc-port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--metrics-port", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve_pytriton:
        return a
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.interval = a.interval or (1000 if a.quick else 3000)
    beside = Path(sys.executable).parent / "perf_analyzer"
    a.perf_analyzer = a.perf_analyzer or (str(beside) if beside.exists() else shutil.which("perf_analyzer"))
    if not a.perf_analyzer:
        raise SystemExit("bench_v2: no perf_analyzer: run tools/v2_tools.sh and this with its venv's python")
    a.case_list = [c.strip() for c in a.cases.split(",") if c.strip()]
    if unknown := [c for c in a.case_list if c not in CASES]:
        raise SystemExit(f"bench_v2: unknown cases {unknown}; known: {', '.join(CASES)}")
    a.names = [a.only] if a.only else ["ours", "pytriton"]
    if a.before:
        if not (a.before / "inference.py").exists():
            raise SystemExit(f"bench_v2: --before {a.before}: no inference.py there")
        a.names.insert(1, "before")
    return a


def measure(a: argparse.Namespace) -> tuple:
    """Both servers up, every case run for each in turn: ({server: {case: [results]}}, errors, skipped)."""
    servers: dict = {}
    raw: dict = {n: {c: [] for c in a.case_list} for n in a.names}
    errors: dict = {n: {} for n in a.names}
    try:
        for name in a.names:
            servers[name] = start_pytriton(a) if name == "pytriton" else start_ours(a, name)
        with tempfile.TemporaryDirectory(prefix="bench_v2-") as tmp:
            workdir = Path(tmp)
            input_data(workdir / "data.json")
            answers = check_answers(servers, workdir)
            for case in a.case_list:
                for rep in range(a.repeat):
                    for name in a.names if rep % 2 == 0 else a.names[::-1]:
                        server = servers[name]
                        if "all" in server.skip or CASES[case][0] in server.skip:
                            continue
                        result = run_case(a, server, case, workdir)
                        if "error" in result:
                            errors[name].setdefault(case, result["error"])
                        else:
                            raw[name][case].append(result)
    finally:
        for server in servers.values():
            server.stop()
    skipped = {n: s.skip for n, s in servers.items() if s.skip}
    return raw, {n: e for n, e in errors.items() if e}, skipped, answers


def summarise(a: argparse.Namespace, raw: dict) -> tuple:
    """The medians {server: {case: {metric: value}}} and the ratios ours/PyTriton of the reported metrics."""
    figures: dict = {}
    for name in a.names:
        figures[name] = {}
        for case, results in raw[name].items():
            if results:
                keys = {k for r in results for k in r}
                figures[name][case] = {k: float(np.median([r[k] for r in results if k in r])) for k in sorted(keys)}
    ratios: dict = {}  # {"ours/pytriton": {case: {metric: ratio}}, "before/pytriton": ..., "ours/before": ...}
    pairs = [
        (x, y) for x, y in (("ours", "pytriton"), ("before", "pytriton"), ("ours", "before")) if {x, y} <= set(a.names)
    ]
    for x, y in pairs:
        ratios[f"{x}/{y}"] = {}
        for case in a.case_list:
            mine, theirs = figures[x].get(case, {}), figures[y].get(case, {})
            ratios[f"{x}/{y}"][case] = {
                k: round(mine[k] / theirs[k], 3) for k in CASES[case][3] if k in mine and theirs.get(k)
            }
    return figures, ratios


def print_table(a: argparse.Namespace, out: dict) -> None:
    figures, ratios = out["figures"], out["ratios"]
    print(f"cpus {out['cpus']}, load average before {out['load_average_before']}, after {out['load_average_after']}")
    print(f"repeat {a.repeat}, windows {a.interval} ms, max batch {a.max_batch}, max wait {a.max_wait_us} us")
    under = f"; serve under {out['serve_python']}"
    under += f", before under {out['before_python']}" if out["before_python"] else ""
    under += f"; serve args {out['serve_args']!r}" if out["serve_args"] else ""
    under += f"; before args {out['before_args']!r}" if out["before_args"] else ""
    print(", ".join(f"{k} {v}" for k, v in out["versions"].items()) + under)
    print("commits " + ", ".join(f"{k} {v}" for k, v in out["commits"].items()))
    answers = out["answers"]
    print(f"answers of {', '.join(answers['servers'])}: deterministic outputs within {answers['max_abs_diff']:.2g}")
    names = a.names
    print(f"{'case':<14}{'metric':<16}" + "".join(f"{n:>11}" for n in names) + "".join(f"{r:>16}" for r in ratios))
    for case in a.case_list:
        for metric in CASES[case][3]:
            digits = 0 if metric in ("obs_per_s", "cpu_us_per_obs") else 1 if metric == "rows_per_call" else 3
            values = [figures[n].get(case, {}).get(metric) for n in names]
            cells = "".join(f"{v:>11.{digits}f}" if v is not None else f"{'-':>11}" for v in values)
            tail = ""
            for pair in ratios.values():
                ratio = pair.get(case, {}).get(metric)
                tail += f"{ratio:>16.3f}" if ratio is not None else f"{'-':>16}"
            print(
                f"{case:<14}{metric:<16}{cells}{tail}   ({'higher' if HIGHER_IS_BETTER[metric] else 'lower'} is better)"
            )
    for name, why in out["skipped"].items():
        for protocol, text in why.items():
            print(f"skipped {name} {protocol}: {text}")
    for name, errs in out["errors"].items():
        for case, text in errs.items():
            print(f"error {name} {case}: {text}")


def main() -> None:
    a = parse_args()
    if a.serve_pytriton:
        return serve_pytriton(a)
    load_before = os.getloadavg()
    raw, errors, skipped, answers = measure(a)
    load_after = os.getloadavg()
    figures, ratios = summarise(a, raw)
    out = {
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "repeat": a.repeat,
        "interval_ms": a.interval,
        "max_batch": a.max_batch,
        "max_wait_us": a.max_wait_us,
        "versions": versions(),
        "serve_python": a.serve_python,
        "before_python": a.before_python if a.before else None,
        "serve_args": a.serve_args,
        "before_args": a.before_args if a.before else None,
        "commits": {n: commit_of(d) for n, d in (("ours", a.inference.parent), ("before", a.before)) if d},
        "figures": figures,
        "ratios": ratios,
        "answers": answers,
        "skipped": skipped,
        "errors": errors,
        "raw": raw,
    }
    if a.json:
        print(json.dumps(out))
    else:
        print_table(a, out)
    if not answers["max_abs_diff"] <= 1e-5:
        raise SystemExit(f"bench_v2: the servers' answers differ by {answers['max_abs_diff']:.3g} (more than 1e-5)")
    return None


if __name__ == "__main__":
    main()
