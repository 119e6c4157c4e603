"""benchmark: the policy's act() side by side with a bare onnxruntime session running ML-Agents'
ONNX in a process of its own."""

from __future__ import annotations

import contextlib
import math
import pkgutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..core.errors import UsageError
from ..core.files import atomic_write, check_output_path
from ..core.observations import check_rows_fit, random_inputs, random_masks
from ..core.report import header, percentiles
from ..core.spec import input_names
from ..loaders.onnx_file import MLAgentsOnnx
from .bare_onnxruntime import settle_threads

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = ["bare_onnxruntime_command", "BareOnnxRuntime", "bare_onnxruntime_job", "mode_benchmark", "show_benchmark"]


def bare_onnxruntime_command() -> list:
    """The command that starts the bare contender (bare_onnxruntime.py) in a process of its own: its source, read
    through the package's loader, run with `python -c`. The same from the clone and from inside the one-file .pyz
    (a file in a zip cannot be run by its path), and the process imports nothing of this package."""
    try:
        source = pkgutil.get_data(__package__, "bare_onnxruntime.py")
    except OSError as exc:
        raise UsageError(f"benchmark: cannot read the bare onnxruntime program ({exc.strerror or exc})")
    if source is None:  # (a loader that gives no files)
        raise UsageError("benchmark: cannot read the bare onnxruntime program (no source beside the package)")
    return [sys.executable or "python3", "-c", source.decode("utf-8")]


class BareOnnxRuntime:
    """The bare contender in its own process (bare_onnxruntime.py): block(n) -> n latencies (ms)."""

    def __init__(self, model, fetch: list, feed: dict):
        import pickle
        import subprocess

        command = bare_onnxruntime_command()
        self.pickle, self.stderr = pickle, tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        except OSError as exc:
            self.stderr.close()
            raise UsageError(f"benchmark: cannot start the bare onnxruntime process ({exc.strerror or exc})")
        try:
            reply = self._ask({"model": model, "fetch": fetch, "feed": feed})
            if reply[0] != "ready":
                raise UsageError(f"benchmark: the bare onnxruntime session cannot run the model ({reply[1]})")
        except BaseException:
            self.close()
            raise

    def _ask(self, message):
        try:
            self.pickle.dump(message, self.proc.stdin)
            self.proc.stdin.flush()
            return self.pickle.load(self.proc.stdout)
        except (OSError, EOFError, self.pickle.UnpicklingError):
            self.proc.wait(timeout=5)
            self.stderr.seek(0)
            lines = self.stderr.read().decode(errors="replace").strip().splitlines()
            raise UsageError(
                f"benchmark: the bare onnxruntime process ended (exit {self.proc.returncode})"
                + (f": {lines[-1][:200]}" if lines else "")
            )

    def block(self, n: int) -> list:
        return self._ask(n)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()  # end of requests: it exits
            try:
                self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.stderr):
            with contextlib.suppress(OSError, ValueError):
                pipe.close()


def bare_onnxruntime_job(ctx: Context, flat: list) -> tuple:
    """What the bare contender runs: (model path or bytes, its deterministic outputs, feed, label). The checkpoint's
    own ML-Agents ONNX, every input fed as MLAgentsOnnx feeds it; else ML-Agents' export of this checkpoint."""
    s = ctx.settings
    try:  # (NotThisPolicy goes through: another policy's ONNX is a failure, not "no ONNX")
        path = ctx.checkpoint_onnx()
        reference = MLAgentsOnnx(path, s)
    except UsageError:
        if ctx.args.onnx:
            raise
        from ..model.export import export_mlagents_onnx

        return (
            export_mlagents_onnx(ctx.checkpoint.actor),
            list(ctx.policy.fetch[True]),
            dict(zip(input_names(s, exported=True), flat)),
            "export of this checkpoint",
        )
    reference.session = None  # the contender runs in a process of its own: no thread pool here
    return reference.model, list(reference.fetch), reference.feed(flat), path.name


def _timed_calls(fn: Callable, n: int) -> list:
    """n latencies (ms) of fn, after one untimed call that wakes the threads after a pause."""
    fn()
    times, perf = [], time.perf_counter
    for _ in range(n):
        t0 = perf()
        fn()
        times.append((perf() - t0) * 1e3)
    return times


def mode_benchmark(ctx: Context):
    """Latency of one control-loop call, policy.act() as a user calls it (its input checks, host
    numpy in, host actions out, device synchronised), side by side with a bare onnxruntime session (default options)
    on the checkpoint's own ONNX.
    The bare session runs in a process of its own; the two take turns in blocks of calls (pipe
    handshake), each block starting once the other side's threads have gone idle, so neither
    slows the other and both see the same machine load."""
    import importlib.util

    a, s = ctx.args, ctx.settings
    if a.plot:
        check_output_path(a.plot, (".png",), "--plot")
    check_rows_fit(a.batch, s)
    policy = ctx.policy
    obs, masks = random_inputs(s, a.seed, a.batch), random_masks(s, a.seed, a.batch)
    flat, _, _ = policy.prepare(obs, masks)
    warmup = max(20, a.runs // 10)

    def ours():
        policy.act(obs, masks)

    def ours_block(n: int) -> list:
        times = _timed_calls(ours, n)
        if ctx.device.type != "cpu" and ctx.engine_name == "torch":  # (onnxruntime's run returns host arrays)
            from ..engines.torch_devices import synchronize

            synchronize(ctx.device)  # (each timed call ends by copying actions to the host, which waits too)
        settle_threads()
        return times

    bare, bare_name = None, None
    if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx"):
        model, fetch, feed, bare_name = bare_onnxruntime_job(ctx, flat)
        bare = BareOnnxRuntime(model, fetch, feed)
    try:
        contenders = {"engine": ours_block, **({"onnxruntime": bare.block} if bare else {})}
        warm = [float(np.median(block(warmup))) for block in contenders.values()]
        # turns of about 0.25 s of calls (a turn's first calls after the other's turn run slower on a busy
        # machine: longer turns dilute that), at least 5 turns each when both run and --runs allows
        block = a.runs if bare is None else max(1, min(math.ceil(a.runs / 5), int(250 / max(max(warm), 1e-3))))
        times, paired = {k: [] for k in contenders}, []
        for turns, done in enumerate(range(0, a.runs, block), 1):
            n = min(block, a.runs - done)
            order = list(contenders) if turns % 2 == 1 else list(contenders)[::-1]  # who goes first alternates
            turn = {key: contenders[key](n) for key in order}
            for key, values in turn.items():
                times[key] += values
            if bare is not None:
                paired.append(float(np.median(turn["engine"]) / np.median(turn["onnxruntime"])))
    finally:
        if bare is not None:
            bare.close()
    ours_t = percentiles(times["engine"])
    result = {
        "runs": a.runs,
        "warmup": warmup,
        "batch": a.batch,
        **ours_t,
        "throughput_per_s": a.batch / (ours_t["avg_ms"] / 1e3),
        **ctx.base(),
        "onnxruntime_p50_ms": None,
        "ratio_to_onnxruntime": None,
        "throughput_ratio_to_onnxruntime": None,
    }
    if bare is not None:
        bare_t = percentiles(times["onnxruntime"])
        result.update(
            onnxruntime_p50_ms=bare_t["p50_ms"],
            onnxruntime_avg_ms=bare_t["avg_ms"],
            onnxruntime_throughput_per_s=a.batch / (bare_t["avg_ms"] / 1e3),
            ratio_to_onnxruntime=ours_t["p50_ms"] / bare_t["p50_ms"],
            throughput_ratio_to_onnxruntime=bare_t["avg_ms"] / ours_t["avg_ms"],
            onnxruntime_model=bare_name,
            onnxruntime_process="separate",
            turns=turns,
            turn_runs=block,
            paired_ratio_to_onnxruntime=float(np.median(paired)),
        )
    from ..engines.factory import engine_report  # (whether device graphs ran, and why not)

    result.update(engine_report(policy.engine))
    if a.plot:
        _plot_latencies(Path(a.plot), times, a)
    result["plot"] = str(Path(a.plot).resolve()) if a.plot else None
    return result, True


def show_benchmark(r: dict) -> list:
    lines = [
        header(r, f"benchmark (runs={r['runs']}, warmup={r['warmup']}, batch={r['batch']})"),
        f"  avg = {r['avg_ms']:.4f} ms | p50 = {r['p50_ms']:.4f} ms | p95 = {r['p95_ms']:.4f} ms | "
        f"p99 = {r['p99_ms']:.4f} ms | max = {r['max_ms']:.4f} ms",
        f"  throughput = {r['throughput_per_s']:,.0f} observations/s",
    ]
    lines += [
        f"  {label}: {r[key]}"
        for key, label in (("precision", "ran as"), ("graphs", "device graphs"), ("compiled", "compiled"))
        if r.get(key)
    ]
    if r.get("graph_calls"):
        lines.append(f"  device graph calls: {', '.join(f'{k} {v}' for k, v in r['graph_calls'].items())}")
    if r["onnxruntime_p50_ms"] is not None:
        lines += [
            f"  bare onnxruntime ({r['onnxruntime_model']}, default session, own process; {r['turns']} turns of up "
            f"to {r['turn_runs']} calls each): p50 = {r['onnxruntime_p50_ms']:.4f} ms | "
            f"throughput = {r['onnxruntime_throughput_per_s']:,.0f} observations/s",
            f"  p50 ratio to onnxruntime = {r['ratio_to_onnxruntime']:.3f} (<= 1 is as fast or faster) | "
            f"throughput ratio = {r['throughput_ratio_to_onnxruntime']:.3f} (>= 1 is as fast or faster)",
            f"  median over turns of the p50 ratio within each turn = {r['paired_ratio_to_onnxruntime']:.3f} "
            f"(steadier on a busy machine)",
        ]
    else:
        lines.append("  onnxruntime not installed: no side-by-side figure")
    if r["plot"]:
        lines.append(f"  plot written: {r['plot']}")
    return lines


def _plot_latencies(path: Path, times: dict, args) -> None:
    check_output_path(path, (".png",), "--plot")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib (pip install matplotlib)")
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, values in times.items():
        ax.hist(values, bins=60, alpha=0.6, label=f"{key} (p50 {np.percentile(values, 50):.4f} ms)")
    ax.set(
        xlabel="latency per call (ms)",
        ylabel="calls",
        title=f"batch={args.batch}, runs={args.runs}, device={args.device}, dtype={args.dtype}",
    )
    ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
