#!/usr/bin/env python3
"""The device check's comparisons (tools/device_check.sh): a device's answers against the CPU's, on the same policy and
the same inputs, in one process, held to a bound. One JSON line on stdout; exit 0 when every comparison holds, 1 when
one misses (an error of float16's or TF32's size, 1e-4 or more, is named so), 2 when it cannot run.

    python tools/device_compare.py providers --device npu:0 --torch-free   # onnxruntime: the device's provider (CANN,
                                                                           # CUDA) against the CPU provider, 1e-5
    python tools/device_compare.py graphs --device npu:1 --second npu:0    # torch: device graphs on against off (the
                                                                           # graph against eager) and against the CPU
                                                                           # float32 engine; a second policy on another
                                                                           # card in the same process, calls interleaved

--model-dir (default: the bundled sample), --rows (the largest batch), --seed, --tol (1e-5), --allow-eager (graphs: pass
when graphs do not run, e.g. under TASK_QUEUE_ENABLE=2, and still compare). Every figure printed is measured here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "assets" / "ppo-Huggy-sample"
FLOAT16_SIZED = 1e-4  # an error this large is no float32 rounding: float16 (CANN's force_fp16), TF32 or HF32
BATCHES = (1, 64, 64, 1, 7, 64)  # sizes repeat, so that captured graphs are replayed on fresh inputs


def worst_error(test: dict, ref: dict) -> float:
    """The largest difference between two engines' outputs of the same names, relative to max(1, |ref|) (SAC's
    unbounded mu, the LSTM memory); inf where one is nan and the other not."""
    import numpy as np

    worst = 0.0
    for name in sorted(set(test) & set(ref)):
        a, b = np.asarray(test[name], np.float64), np.asarray(ref[name], np.float64)
        if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
            return float("inf")
        if a.size:
            worst = max(worst, float(np.nan_to_num(np.abs(a - b) / np.maximum(np.abs(b), 1.0)).max()))
    return worst


def verdict(error: float, tol: float) -> str:
    """'holds', 'float16-sized' (1e-4 or more: a precision that is not float32) or 'misses'."""
    return "holds" if error <= tol else "float16-sized" if error >= FLOAT16_SIZED else "misses"


def inputs_for(policy, rows: int, seed: int) -> list:
    from mlagents_inference.core.observations import random_inputs, random_masks

    masks = random_masks(policy.settings, seed, rows) if policy.settings.discrete_branches else None
    return policy.prepare(random_inputs(policy.settings, seed, rows), masks)[0]


def compare_providers(args) -> dict:
    """The device's provider (onnxruntime: CANN on npu, CUDA on cuda) against the CPU provider."""
    import inference
    from mlagents_inference.engines.factory import engine_report

    device = inference.load(str(args.model_dir), device=args.device, engine="onnxruntime")
    cpu = inference.load(str(args.model_dir), device="cpu", engine="onnxruntime")
    worst = 0.0
    for call, rows in enumerate(b for b in BATCHES if b <= args.rows):
        flat = inputs_for(device, rows, args.seed + call)
        worst = max(worst, worst_error(device.engine.run(flat), cpu.engine.run(flat)))
    return {
        "compared": f"{device.engine.providers[0]} on {device.device} against CPUExecutionProvider",
        "max_err": worst,
        "verdict": verdict(worst, args.tol),
        **engine_report(device.engine),
    }


def compare_graphs(args) -> dict:
    """torch on the device with graphs on against graphs off and against the CPU float32 engine; with --second, a policy
    on another card in the same process, its calls interleaved with the first's."""
    import inference
    from mlagents_inference.engines.factory import engine_report

    model = str(args.model_dir)
    on = inference.load(model, device=args.device, engine="torch", graphs=True)
    off = inference.load(model, device=args.device, engine="torch", graphs=False)
    cpu = inference.load(model, device="cpu", engine="torch")
    other = inference.load(model, device=args.second, engine="torch", graphs=True) if args.second else None
    vs_eager = vs_cpu = vs_other = 0.0
    for call, rows in enumerate(b for b in BATCHES if b <= args.rows):
        flat = inputs_for(on, rows, args.seed + call)
        got, cpu_out = on.engine.run(flat), cpu.engine.run(flat)
        if other is not None:
            vs_other = max(vs_other, worst_error(other.engine.run(flat), cpu_out))
        vs_eager = max(vs_eager, worst_error(got, off.engine.run(flat)))
        vs_cpu = max(vs_cpu, worst_error(got, cpu_out))
    report = engine_report(on.engine)
    graphs_ran = bool(report["graphs"]) and report["graphs"].startswith("on")
    worst = max(vs_eager, vs_cpu, vs_other)
    result = {
        "compared": f"torch on {on.device}: graphs on against off and against the CPU"
        + (f"; a second policy on {other.device} against the CPU" if other else ""),
        "graph_vs_eager_err": vs_eager,
        "vs_cpu_err": vs_cpu,
        "second_vs_cpu_err": vs_other if other else None,
        "max_err": worst,
        "verdict": verdict(worst, args.tol),
        **report,
        "second_graphs": engine_report(other.engine)["graphs"] if other else None,
    }
    if not graphs_ran and on.device.type != "cpu" and not args.allow_eager:
        result["verdict"] = "graphs did not run"
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("providers", "graphs"))
    parser.add_argument("--device", required=True)
    parser.add_argument("--second", help="graphs: a second device for a second policy in the same process")
    parser.add_argument("--model-dir", type=Path, default=SAMPLE)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument("--allow-eager", action="store_true")
    parser.add_argument("--torch-free", action="store_true", help="torch made unimportable (the torch-free install)")
    args = parser.parse_args(argv)
    if args.torch_free:
        sys.modules["torch"] = None
    sys.path.insert(0, str(ROOT))
    from mlagents_inference.core.errors import UsageError

    try:
        result = (compare_providers if args.what == "providers" else compare_graphs)(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = {"check": args.what, "device": args.device, "tol": args.tol, **result}
    figures = f"max error {result['max_err']:.3e} (tol {args.tol:g})"
    result["summary"] = f"{result['verdict']}: {figures}; {result['compared']}; graphs: {result.get('graphs')}"
    print(json.dumps(result))
    return 0 if result["verdict"] == "holds" else 1


if __name__ == "__main__":
    sys.exit(main())
