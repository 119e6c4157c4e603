"""Modes that check the policy: precision (against a float64 reference) and onnx-compare (against ML-Agents'
own ONNX), on ML-Agents' modules rebuilt in torch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import NotThisPolicy
from ..core.observations import check_rows_fit, random_inputs, random_masks
from ..core.report import PARITY_MIN_COS, compare, floats, fmt, header, parity, parity_holds
from ..core.spec import PolicySettings
from ..loaders.onnx_file import MLAgentsOnnx

if TYPE_CHECKING:  # (annotations only)
    from ..api.policy import Policy
    from ..services.context import Context

__all__ = [
    "mode_precision",
    "show_precision",
    "mode_onnx_compare",
    "compare_with_reference",
    "show_onnx_compare",
    "memory_rollout",
]


def mode_precision(ctx: Context):
    """The chosen device/dtype/engine against a float64 CPU reference computed from the checkpoint: continuous actions
    (cos, max abs error), discrete actions (share identical; max error of the masked probabilities)."""
    s, n = ctx.settings, ctx.args.samples
    check_rows_fit(n, s, "--samples")
    policy = ctx.policy
    obs, masks = random_inputs(s, ctx.args.seed, n), random_masks(s, ctx.args.seed, n)
    flat, _, _ = policy.prepare(obs, masks)
    test, ref = policy.engine.run(flat), policy.reference(flat)
    same_as_test = ctx.engine_name == "torch" and ctx.device.type == "cpu" and ctx.args.dtype == "float32"
    from ..engines.torch_devices import resolve_device
    from ..engines.torch_engine import TorchEngine

    cpu32 = test if same_as_test else TorchEngine(ctx.checkpoint.actor, resolve_device("cpu"), "float32").run(flat)
    key = "deterministic_continuous_actions" if s.continuous_size else "probabilities"
    vs_ref, vs_cpu = compare(test[key], ref[key]), compare(test[key], cpu32[key])
    min_cos = 0.999  # a low-precision dtype's bar; --tol sets the error's
    passed = vs_ref["cos"] >= min_cos and vs_ref["max_abs_err"] < ctx.args.tol
    result = {
        "reference": "float64 cpu",
        "samples": n,
        "tol": ctx.args.tol,
        "min_cos": min_cos,
        "seed": ctx.args.seed,
        "compared": "continuous actions" if s.continuous_size else "masked action probabilities",
        **{k: vs_ref[k] for k in ("cos", "max_abs_err", "max_rel_err", "bitwise_equal_ratio")},
        "vs_cpu_float32": vs_cpu,
    }
    if s.discrete_branches:
        ours, theirs = test["deterministic_discrete_actions"], ref["deterministic_discrete_actions"]
        result["discrete_identical_ratio"] = float(np.mean((ours == theirs).all(axis=1)))
        result["probability_max_abs_err"] = compare(test["probabilities"], ref["probabilities"])["max_abs_err"]
    if s.memory_size:
        result["memory_max_abs_err"] = compare(test["recurrent_out"], ref["recurrent_out"])["max_abs_err"]
    from ..engines.factory import engine_report  # (what float32 ran as: TF32/HF32, the provider's precision mode)

    return {**result, **engine_report(policy.engine), "passed": passed, **ctx.base()}, passed


def show_precision(r: dict) -> list:
    c = r["vs_cpu_float32"]
    lines = [
        header(r, "precision against a float64 CPU reference"),
        f"  samples = {r['samples']} (normal observations, RandomState({r['seed']}))",
        f"  vs float64: cos = {r['cos']:.8f} | max_abs_err = {r['max_abs_err']:.3e} | max_rel_err = "
        f"{r['max_rel_err']:.3e} | bitwise equal (after float32 rounding) = {r['bitwise_equal_ratio']:.2%} "
        f"({r['compared']})",
        f"  vs CPU float32 (torch): cos = {c['cos']:.8f} | max_abs_err = {c['max_abs_err']:.3e} | "
        f"bitwise equal = {c['bitwise_equal_ratio']:.2%}",
    ]
    if "discrete_identical_ratio" in r:
        lines.append(
            f"  discrete actions identical to float64 = {r['discrete_identical_ratio']:.2%} "
            f"(max probability error {r['probability_max_abs_err']:.3e})"
        )
    if "memory_max_abs_err" in r:
        lines.append(f"  next memory vs float64: max_abs_err = {r['memory_max_abs_err']:.3e}")
    lines += [
        f"  {label}: {r[key]}" for key, label in (("precision", "ran as"), ("graphs", "device graphs")) if r.get(key)
    ]
    lines.append(f"  holds (cos >= {r['min_cos']:g} and max_abs_err < {r['tol']:g}): {'yes' if r['passed'] else 'NO'}")
    return lines


def mode_onnx_compare(ctx: Context):
    """The rebuilt policy against the ML-Agents ONNX of the same checkpoint (onnxruntime), with
    random action masks; a memory policy also over a --steps rollout carrying its memory."""
    onnx_path = ctx.checkpoint_onnx()
    result = {"reference": str(onnx_path), "rows": ctx.args.batch, "seed": ctx.args.seed, **ctx.base()}
    try:  # (its inputs, or its answers, are not this checkpoint's)
        return compare_with_reference(ctx, MLAgentsOnnx(onnx_path, ctx.settings), result)
    except NotThisPolicy as exc:
        return {
            **result,
            "not_this_policy": str(exc),
            "max_abs_err": None,
            "mean_abs_err": None,
            "cos": None,
            "passed": False,
        }, False


def compare_with_reference(ctx: Context, reference: MLAgentsOnnx, result: dict):
    s, rows = ctx.settings, ctx.args.batch
    check_rows_fit(rows, s)
    policy = ctx.policy
    obs, masks = random_inputs(s, ctx.args.seed, rows), random_masks(s, ctx.args.seed, rows)
    memory = None
    if s.memory_size:  # a state as a running LSTM has it: h in (-1, 1), c wider
        rng = np.random.RandomState(ctx.args.seed + 1)
        half = s.memory_size // 2
        memory = np.concatenate([np.tanh(rng.randn(rows, half)), 2 * rng.randn(rows, half)], axis=1).astype(np.float32)
    flat, _, _ = policy.prepare(obs, masks, memory)
    ours, theirs = policy.run(flat, rows), reference.deterministic(flat)
    stats, tol = parity(s, ours, theirs), ctx.args.tol
    passed = parity_holds(stats, tol)
    if "continuous_actions" in ours:
        result.update(
            reference_first=floats(theirs["continuous_actions"][0, :6]),
            rebuilt_first=floats(ours["continuous_actions"][0, :6]),
        )
    if "memory" in ours:
        stats["rollout"] = memory_rollout(policy, reference, s, ctx.args.seed, ctx.args.steps)
        passed = passed and parity_holds(stats["rollout"], tol)
    result.update(
        dict.fromkeys(("max_abs_err", "mean_abs_err", "cos")),
        **stats,  # (these three first, None if absent)
        tol=tol,
        min_cos=PARITY_MIN_COS,
        legacy_interface=reference.iface.legacy,
        passed=passed,
    )
    return result, passed


def show_onnx_compare(r: dict) -> list:
    name = Path(r["reference"]).name
    lines = [header(r, f"ONNX cross-check (batch={r['rows']}, seed={r['seed']}) against {name}")]
    if "not_this_policy" in r:
        return lines + [f"  {name} {r['not_this_policy']}: not this policy"]
    if r["max_abs_err"] is not None:
        lines += [
            f"  ML-Agents ONNX deterministic[0][:6] = {fmt(r['reference_first'])}",
            f"  rebuilt policy deterministic[0][:6] = {fmt(r['rebuilt_first'])}",
            f"  max_abs_err = {r['max_abs_err']:.3e} | mean_abs_err = {r['mean_abs_err']:.3e} | cos = {r['cos']:.8f}",
        ]
    if "discrete_mismatches" in r:
        lines.append(f"  discrete actions: {r['discrete_mismatches']} of {r['rows']} rows differ (random masks)")
    if "rollout" in r:
        ro = r["rollout"]
        lines.append(f"  next memory: max error relative to max(1, |value|) = {r['memory_max_rel_err']:.3e}")
        lines.append(
            f"  {ro['steps']}-step rollout carrying each side's own memory: worst step {ro['worst_step']}: "
            f"memory {ro['memory_max_rel_err']:.3e}, {ro.get('discrete_mismatches', 0)} discrete mismatches"
            + (f", continuous {ro['max_abs_err']:.3e}" if "max_abs_err" in ro else "")
        )
    if r["legacy_interface"]:
        lines.append(
            f"  ({name} has no deterministic_* outputs (ML-Agents 1.x, early 2.x): compared through its "
            f"action mean / masked logits)"
        )
    return lines + [
        f"  holds (max_abs_err < {r['tol']:g}, cos >= {r['min_cos']:g}, no discrete mismatch, "
        f"memory < {r['tol']:g}): " + ("yes" if r["passed"] else "NO")
    ]


def memory_rollout(policy: Policy, reference: MLAgentsOnnx, s: PolicySettings, seed: int, steps: int) -> dict:
    """Both sides from zero memory over `steps` steps of 8 agents, each carrying its own memory."""
    rows, worst, worst_step = 8, {}, 0
    ours_mem = theirs_mem = np.zeros((rows, s.memory_size), np.float32)
    for t in range(steps):
        obs, masks = random_inputs(s, seed + 100 + t, rows), random_masks(s, seed + 100 + t, rows)
        ours = policy.run(policy.prepare(obs, masks, ours_mem)[0], rows)
        theirs = reference.deterministic(policy.prepare(obs, masks, theirs_mem)[0])
        p = parity(s, ours, theirs)
        if (
            not worst
            or p.get("memory_max_rel_err", 0) > worst.get("memory_max_rel_err", 0)
            or p.get("discrete_mismatches", 0) > worst.get("discrete_mismatches", 0)
        ):
            worst, worst_step = p, t
        worst = {k: max(worst.get(k, 0), v) if k != "cos" else min(worst.get(k, 1), v) for k, v in p.items()}
        ours_mem, theirs_mem = ours["memory"], theirs["memory"]
    return {**worst, "worst_step": worst_step, "steps": steps}
