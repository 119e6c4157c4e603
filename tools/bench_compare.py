#!/usr/bin/env python3
"""Does `inference.py --mode benchmark` report what a bare onnxruntime session does on its own?

    python tools/bench_compare.py                                  # bundled sample, batch 4096
    python tools/bench_compare.py --batch 1 --runs 2000
    python tools/bench_compare.py --model-dir ../shared/fixtures/zoo/visual-resnet --batch 64
    python tools/bench_compare.py --rounds 5 --json -- --engine torch   # after --: more benchmark options

Alternates, on the same machine within the same minutes:

  * ALONE: a fresh Python process that imports only numpy and onnxruntime, opens the policy's
    ML-Agents ONNX (<model-dir>/<Behavior>.onnx, or --onnx) with a default
    onnxruntime.InferenceSession, feeds every input (random normal vectors, uniform [0, 1)
    images, all-allowed action masks, zero memories) at --batch rows, fetches only the
    deterministic outputs (and recurrent_out), warms up max(20, runs // 10) calls and times
    --runs calls;
  * BENCH: `inference.py --mode benchmark --json --batch B --runs R --model-dir M`.

in the order ALONE, BENCH, ALONE, BENCH, ..., ALONE (--rounds benchmarks), so that each
benchmark sits between two lone runs. Each row prints the benchmark's own throughput
(throughput_per_s: our engine), the bare session's throughput inside the benchmark
(onnxruntime_throughput_per_s), the mean of the two neighbouring lone runs, and the ratios
benchmark / alone. Throughput everywhere = batch / mean latency of one call, as the benchmark
computes it; the p50 latencies are compared too (steadier on a busy machine: a mean takes every
preemption in). At the end, the medians of the ratios over the rounds and whether the
benchmark's own figure lies within --tolerance (default 10 %) of the lone bare session: the
benchmark's side-by-side measurement must not change what it measures.

On a shared, noisy machine compare the ratios, not absolute figures across runs.
Exit code: 0 within tolerance, 1 not, 2 a run failed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The lone bare session: argv = onnx path, batch, runs, seed; prints one JSON line.
ALONE = r"""
import json, sys, time
import numpy as np
import onnxruntime as ort
path, batch, runs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])  # default options
rng = np.random.RandomState(seed)
feed = {}
for i in session.get_inputs():
    shape = [batch] + [int(d) for d in i.shape[1:]]
    if i.name == "action_masks":
        feed[i.name] = np.ones(shape, np.float32)
    elif i.name == "recurrent_in":
        feed[i.name] = np.zeros(shape, np.float32)
    elif len(shape) == 4:  # a camera
        feed[i.name] = rng.rand(*shape).astype(np.float32)
    else:
        feed[i.name] = rng.randn(*shape).astype(np.float32)
outputs = [o.name for o in session.get_outputs()]
fetch = [o for o in outputs if o.startswith("deterministic_") or o == "recurrent_out"] or outputs
for _ in range(max(20, runs // 10)):
    session.run(fetch, feed)
times, perf = [], time.perf_counter
for _ in range(runs):
    t0 = perf()
    session.run(fetch, feed)
    times.append((perf() - t0) * 1e3)
t = np.asarray(times)
print(json.dumps({"p50_ms": float(np.percentile(t, 50)), "avg_ms": float(t.mean()),
                  "throughput_per_s": batch / (t.mean() / 1e3), "onnxruntime": ort.__version__}))
"""


def default_onnx(model_dir: Path) -> Path:
    found = sorted(model_dir.glob("*.onnx"))
    if len(found) != 1:
        sys.exit(f"error: {model_dir}: expected one <Behavior>.onnx at its top, found {len(found)}; pass --onnx")
    return found[0]


def run_json(cmd: list, what: str) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr[-2000:])
        print(f"error: {what} failed (exit {proc.returncode})", file=sys.stderr)
        sys.exit(2)
    return json.loads(lines[-1])


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-dir", default=str(ROOT / "assets" / "ppo-Huggy-sample"))
    p.add_argument(
        "--onnx", help="the bare session's model (default: the one <Behavior>.onnx at the top of --model-dir)"
    )
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--runs", type=int, default=30, help="timed calls per run, both sides (default 30)")
    p.add_argument("--rounds", type=int, default=5, help="benchmark runs, each between two lone runs (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--python", default=sys.executable, help="interpreter for both (default: this one)")
    p.add_argument(
        "--inference",
        default=str(ROOT / "inference.py"),
        help="the inference.py to benchmark (default: this checkout's; e.g. an older worktree's)",
    )
    p.add_argument("--json", action="store_true", help="one JSON summary line at the end")
    a = p.parse_args(argv)
    model_dir = Path(a.model_dir).resolve()
    onnx = Path(a.onnx).resolve() if a.onnx else default_onnx(model_dir)
    alone_cmd = [a.python, "-c", ALONE, str(onnx), str(a.batch), str(a.runs), str(a.seed)]
    bench_cmd = [
        a.python,
        str(Path(a.inference).resolve()),
        "--mode",
        "benchmark",
        "--json",
        "--batch",
        str(a.batch),
        "--runs",
        str(a.runs),
        "--seed",
        str(a.seed),
        "--model-dir",
        str(model_dir),
        *extra,
    ]
    say = (lambda *x: None) if a.json else print
    say(f"model {model_dir.name} | bare ONNX {onnx.name} | batch {a.batch} | runs {a.runs} | rounds {a.rounds}")
    say(
        f"{'':8}{'benchmark: ours/s':>18}{'bench: bare/s':>15}{'alone: bare/s':>15}{'ours/alone':>12}"
        f"{'bench-bare/alone':>18}{'ours/bench-bare':>17}{'p50 ms: ours | bench-bare | alone':>36}"
    )
    lone_runs = [run_json(alone_cmd, "the lone bare session")]
    alone = [lone_runs[-1]["throughput_per_s"]]
    say(f"{'alone':8}{'':18}{'':15}{alone[-1]:>15,.0f}{'':47}{lone_runs[-1]['p50_ms']:>36.4f}")
    rows = []
    for r in range(a.rounds):
        bench = run_json(bench_cmd, "inference.py --mode benchmark")
        lone_runs.append(run_json(alone_cmd, "the lone bare session"))
        alone.append(lone_runs[-1]["throughput_per_s"])
        lone = (alone[-2] + alone[-1]) / 2  # the two lone runs around this benchmark
        lone_p50 = (lone_runs[-2]["p50_ms"] + lone_runs[-1]["p50_ms"]) / 2
        ours, inside = bench["throughput_per_s"], bench.get("onnxruntime_throughput_per_s")
        row = {
            "round": r,
            "ours_per_s": ours,
            "bench_bare_per_s": inside,
            "alone_per_s": lone,
            "ours_to_alone": ours / lone,
            "bench_bare_to_alone": inside / lone if inside else None,
            "ours_to_bench_bare": bench.get("throughput_ratio_to_onnxruntime"),
            "p50_ms": bench["p50_ms"],
            "onnxruntime_p50_ms": bench.get("onnxruntime_p50_ms"),
            "alone_p50_ms": lone_p50,
            "p50_alone_to_ours": lone_p50 / bench["p50_ms"],
        }  # > 1: the benchmark's p50 is the faster
        rows.append(row)
        say(
            f"{'bench ' + str(r + 1):8}{ours:>18,.0f}{inside or float('nan'):>15,.0f}{lone:>15,.0f}"
            f"{row['ours_to_alone']:>12.3f}{row['bench_bare_to_alone'] or float('nan'):>18.3f}"
            f"{row['ours_to_bench_bare'] or float('nan'):>17.3f}"
            f"{row['p50_ms']:>14.4f} |{row['onnxruntime_p50_ms'] or float('nan'):>9.4f} |{lone_p50:>9.4f}"
        )
        say(f"{'alone':8}{'':18}{'':15}{alone[-1]:>15,.0f}{'':47}{lone_runs[-1]['p50_ms']:>36.4f}")
    median = {
        k: statistics.median(r[k] for r in rows)
        for k in ("ours_to_alone", "bench_bare_to_alone", "ours_to_bench_bare", "p50_alone_to_ours")
        if all(r[k] is not None for r in rows)
    }
    within = abs(median["ours_to_alone"] - 1) <= a.tolerance
    say(
        f"median ratios: benchmark's own throughput / lone bare session = {median['ours_to_alone']:.3f}"
        + (
            f" | benchmark's bare / lone bare = {median['bench_bare_to_alone']:.3f}"
            if "bench_bare_to_alone" in median
            else ""
        )
        + (f" | ours / benchmark's bare = {median['ours_to_bench_bare']:.3f}" if "ours_to_bench_bare" in median else "")
        + f" | lone p50 / benchmark's p50 = {median['p50_alone_to_ours']:.3f}"
    )
    say(f"benchmark's own figure within {a.tolerance:.0%} of a lone bare session: {'yes' if within else 'NO'}")
    if a.json:
        print(
            json.dumps(
                {
                    "model_dir": str(model_dir),
                    "onnx": str(onnx),
                    "batch": a.batch,
                    "runs": a.runs,
                    "alone_per_s": alone,
                    "alone_p50_ms": [r["p50_ms"] for r in lone_runs],
                    "rounds": rows,
                    "median": median,
                    "within_tolerance": within,
                }
            )
        )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
