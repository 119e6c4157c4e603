"""Modes that check the policy: precision (against a float64 reference), onnx-compare (against
ML-Agents' own ONNX) and export-onnx. They work on ML-Agents' modules rebuilt in torch (the torch layer is imported
when they run: benchmark borrows checkpoint_onnx without torch)."""
from pathlib import Path

import numpy as np

from .context import Context, check_rows_fit, compare, header
from .errors import NotThisPolicy, UsageError
from .observations import random_inputs, random_masks
from .outputs import atomic_write, check_output_path, floats, fmt, refuse_same_file
from .policy import Policy
from .runtime import MLAgentsOnnx, onnx_session
from .sources import DEFAULT_EXPORT, find_checkpoint_onnx, mlagents_onnx_files, regular_file
from .spec import PolicySettings, input_names, step_outputs


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
    from .engines import TorchEngine, resolve_device
    cpu32 = test if same_as_test else TorchEngine(ctx.checkpoint.actor, resolve_device("cpu"), "float32").run(flat)
    key = "deterministic_continuous_actions" if s.continuous_size else "probabilities"
    vs_ref, vs_cpu = compare(test[key], ref[key]), compare(test[key], cpu32[key])
    min_cos = 0.999  # a low-precision dtype's bar; --tol sets the error's
    passed = vs_ref["cos"] >= min_cos and vs_ref["max_abs_err"] < ctx.args.tol
    result = {"reference": "float64 cpu", "samples": n, "tol": ctx.args.tol, "min_cos": min_cos, "seed": ctx.args.seed,
              "compared": "continuous actions" if s.continuous_size else "masked action probabilities",
              **{k: vs_ref[k] for k in ("cos", "max_abs_err", "max_rel_err", "bitwise_equal_ratio")},
              "vs_cpu_float32": vs_cpu}
    if s.discrete_branches:
        ours, theirs = test["deterministic_discrete_actions"], ref["deterministic_discrete_actions"]
        result["discrete_identical_ratio"] = float(np.mean((ours == theirs).all(axis=1)))
        result["probability_max_abs_err"] = compare(test["probabilities"], ref["probabilities"])["max_abs_err"]
    if s.memory_size:
        result["memory_max_abs_err"] = compare(test["recurrent_out"], ref["recurrent_out"])["max_abs_err"]
    return {**result, "passed": passed, **ctx.base()}, passed


def show_precision(r: dict) -> list:
    c = r["vs_cpu_float32"]
    lines = [header(r, "precision against a float64 CPU reference"),
             f"  samples = {r['samples']} (normal observations, RandomState({r['seed']}))",
             f"  vs float64: cos = {r['cos']:.8f} | max_abs_err = {r['max_abs_err']:.3e} | max_rel_err = "
             f"{r['max_rel_err']:.3e} | bitwise equal (after float32 rounding) = {r['bitwise_equal_ratio']:.2%} ({r['compared']})",
             f"  vs CPU float32 (torch): cos = {c['cos']:.8f} | max_abs_err = {c['max_abs_err']:.3e} | "
             f"bitwise equal = {c['bitwise_equal_ratio']:.2%}"]
    if "discrete_identical_ratio" in r:
        lines.append(f"  discrete actions identical to float64 = {r['discrete_identical_ratio']:.2%} "
                     f"(max probability error {r['probability_max_abs_err']:.3e})")
    if "memory_max_abs_err" in r:
        lines.append(f"  next memory vs float64: max_abs_err = {r['memory_max_abs_err']:.3e}")
    lines.append(f"  holds (cos >= {r['min_cos']:g} and max_abs_err < {r['tol']:g}): {'yes' if r['passed'] else 'NO'}")
    return lines


def checkpoint_onnx(ctx: Context) -> Path:
    """The ONNX that belongs to the chosen checkpoint: --onnx, <Behavior>-<step>.onnx beside it,
    or <Behavior>.onnx for the final checkpoint only."""
    if ctx.args.onnx:
        return regular_file("--onnx", ctx.args.onnx)
    ckpt, src = ctx.checkpoint, ctx.source
    found = find_checkpoint_onnx(ckpt.path, src.model_dir, src.behavior, ckpt.global_step)
    if found is None:
        raise UsageError(f"{ckpt.path.name}: no ONNX belongs to this checkpoint (looked for "
                         f"{src.behavior or ckpt.path.parent.name}-<step>.onnx beside it and the final "
                         f"{src.behavior or ckpt.path.parent.name}.onnx); pass --onnx FILE")
    return found


def parity(s: PolicySettings, ours: dict, theirs: dict) -> dict:
    """How far our actions are from the reference's: continuous max abs error and cos, discrete
    mismatching rows, memory error relative to max(1, |value|)."""
    out = {}
    if "continuous_actions" in ours:
        st = compare(ours["continuous_actions"], theirs["continuous_actions"])
        out.update(max_abs_err=st["max_abs_err"], mean_abs_err=st["mean_abs_err"], cos=st["cos"])
    if "discrete_actions" in ours:
        out["discrete_mismatches"] = int((np.asarray(ours["discrete_actions"]) != np.asarray(theirs["discrete_actions"])).any(axis=1).sum())
    if "memory" in ours:
        a, b = np.asarray(ours["memory"], np.float64), np.asarray(theirs["memory"], np.float64)
        out["memory_max_rel_err"] = float((np.abs(a - b) / np.maximum(1.0, np.abs(b))).max())
    return out


PARITY_MIN_COS = 0.999999  # onnx-compare: the rebuilt policy's continuous actions against ML-Agents' ONNX


def _parity_holds(p: dict, tol: float) -> bool:
    return (p.get("max_abs_err", 0.0) < tol and p.get("cos", 1.0) >= PARITY_MIN_COS
            and p.get("discrete_mismatches", 0) == 0 and p.get("memory_max_rel_err", 0.0) < tol)


def mode_onnx_compare(ctx: Context):
    """The rebuilt policy against the ML-Agents ONNX of the same checkpoint (onnxruntime), with
    random action masks; a memory policy also over a --steps rollout carrying its memory."""
    onnx_path = checkpoint_onnx(ctx)
    result = {"reference": str(onnx_path), "rows": ctx.args.batch, "seed": ctx.args.seed, **ctx.base()}
    try:  # (its inputs, or its answers, are not this checkpoint's)
        return compare_with_reference(ctx, MLAgentsOnnx(onnx_path, ctx.settings), result)
    except NotThisPolicy as exc:
        return {**result, "not_this_policy": str(exc), "max_abs_err": None, "mean_abs_err": None, "cos": None,
                "passed": False}, False


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
    passed = _parity_holds(stats, tol)
    if "continuous_actions" in ours:
        result.update(reference_first=floats(theirs["continuous_actions"][0, :6]),
                      rebuilt_first=floats(ours["continuous_actions"][0, :6]))
    if "memory" in ours:
        stats["rollout"] = memory_rollout(policy, reference, s, ctx.args.seed, ctx.args.steps)
        passed = passed and _parity_holds(stats["rollout"], tol)
    result.update(dict.fromkeys(("max_abs_err", "mean_abs_err", "cos")), **stats,  # (these three first, None if absent)
                  tol=tol, min_cos=PARITY_MIN_COS, legacy_interface=reference.iface.legacy, passed=passed)
    return result, passed


def show_onnx_compare(r: dict) -> list:
    name = Path(r["reference"]).name
    lines = [header(r, f"ONNX cross-check (batch={r['rows']}, seed={r['seed']}) against {name}")]
    if "not_this_policy" in r:
        return lines + [f"  {name} {r['not_this_policy']}: not this policy"]
    if r["max_abs_err"] is not None:
        lines += [f"  ML-Agents ONNX deterministic[0][:6] = {fmt(r['reference_first'])}",
                  f"  rebuilt policy deterministic[0][:6] = {fmt(r['rebuilt_first'])}",
                  f"  max_abs_err = {r['max_abs_err']:.3e} | mean_abs_err = {r['mean_abs_err']:.3e} | cos = {r['cos']:.8f}"]
    if "discrete_mismatches" in r:
        lines.append(f"  discrete actions: {r['discrete_mismatches']} of {r['rows']} rows differ (random masks)")
    if "rollout" in r:
        ro = r["rollout"]
        lines.append(f"  next memory: max error relative to max(1, |value|) = {r['memory_max_rel_err']:.3e}")
        lines.append(f"  {ro['steps']}-step rollout carrying each side's own memory: worst step {ro['worst_step']}: "
                     f"memory {ro['memory_max_rel_err']:.3e}, {ro.get('discrete_mismatches', 0)} discrete mismatches"
                     + (f", continuous {ro['max_abs_err']:.3e}" if "max_abs_err" in ro else ""))
    if r["legacy_interface"]:
        lines.append(f"  ({name} has no deterministic_* outputs (ML-Agents 1.x, early 2.x): compared through its "
                     f"action mean / masked logits)")
    return lines + [f"  holds (max_abs_err < {r['tol']:g}, cos >= {r['min_cos']:g}, no discrete mismatch, "
                    f"memory < {r['tol']:g}): " + ("yes" if r["passed"] else "NO")]


def memory_rollout(policy: Policy, reference: MLAgentsOnnx, s: PolicySettings, seed: int, steps: int) -> dict:
    """Both sides from zero memory over `steps` steps of 8 agents, each carrying its own memory."""
    rows, worst, worst_step = 8, {}, 0
    ours_mem = theirs_mem = np.zeros((rows, s.memory_size), np.float32)
    for t in range(steps):
        obs, masks = random_inputs(s, seed + 100 + t, rows), random_masks(s, seed + 100 + t, rows)
        ours = policy.run(policy.prepare(obs, masks, ours_mem)[0], rows)
        theirs = reference.deterministic(policy.prepare(obs, masks, theirs_mem)[0])
        p = parity(s, ours, theirs)
        if not worst or p.get("memory_max_rel_err", 0) > worst.get("memory_max_rel_err", 0) or \
                p.get("discrete_mismatches", 0) > worst.get("discrete_mismatches", 0):
            worst, worst_step = p, t
        worst = {k: max(worst.get(k, 0), v) if k != "cos" else min(worst.get(k, 1), v) for k, v in p.items()}
        ours_mem, theirs_mem = ours["memory"], theirs["memory"]
    return {**worst, "worst_step": worst_step, "steps": steps}


def mode_export_onnx(ctx: Context):
    """Write the policy with ML-Agents' ONNX interface (torch.onnx.export of the same modules, as
    ML-Agents exports them), verified against the checkpoint's own ONNX before it is written."""
    import onnx
    output = check_output_path(ctx.args.output or DEFAULT_EXPORT, (".onnx",))
    s, ckpt, src = ctx.settings, ctx.checkpoint, ctx.source
    # ML-Agents' own ONNX files of this checkpoint are inputs too, read or not at load time (a
    # policy whose inputs are all normalised never reads them): the export is verified against one.
    theirs = [p for p in mlagents_onnx_files(ckpt.path, src.model_dir, src.behavior, ckpt.global_step) if p.is_file()]
    refuse_same_file(output, [ckpt.path] + ([ckpt.onnx.path] if ckpt.onnx else []) +
                     ([Path(ctx.args.onnx)] if ctx.args.onnx else []) + theirs)
    from .serializer import export_mlagents_onnx
    data = export_mlagents_onnx(ckpt.actor)
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model)
    rows = 64
    obs, masks = random_inputs(s, ctx.args.seed, rows), random_masks(s, ctx.args.seed, rows)
    memory = np.random.RandomState(ctx.args.seed + 1).randn(rows, s.memory_size).astype(np.float32) if s.memory_size else None
    flat, _, _ = ctx.policy.prepare(obs, masks, memory)
    fetch = step_outputs(s, True)
    feed = dict(zip(input_names(s, exported=True), flat))
    mine = dict(zip(fetch, onnx_session(data, tuned=False).run(fetch, feed)))
    reference_path = None
    try:  # another policy's ONNX named with --onnx is a failure (exit 1), never "no ONNX"
        reference_path = checkpoint_onnx(ctx)
        theirs = MLAgentsOnnx(reference_path, s).deterministic(flat)
        reference_name = str(reference_path)
    except (UsageError, NotThisPolicy) as exc:  # no usable ML-Agents ONNX beside the checkpoint: hold it to float64
        if ctx.args.onnx:
            raise
        theirs = ctx.policy.decide({k: np.asarray(v, np.float32) for k, v in ctx.policy.reference(flat).items()}, rows)
        reference_name = "float64 rebuild (" + ("no ML-Agents ONNX for this checkpoint" if reference_path is None else
                                                f"{reference_path.name} not usable: {exc}") + ")"
    ours = ctx.policy.decide(mine, rows)  # the export's deterministic outputs, as actions and memory
    stats = parity(s, ours, theirs)
    max_abs = max([stats.get("max_abs_err", 0.0), stats.get("memory_max_rel_err", 0.0)])
    identical = all(np.array_equal(ours[k], theirs[k]) for k in ours)
    tol = 1e-5  # the export is written only this close to the reference
    passed = max_abs <= tol and stats.get("discrete_mismatches", 0) == 0
    if passed:
        atomic_write(output, lambda tmp: tmp.write_bytes(data))
    initializers = {x.name for x in model.graph.initializer}
    return {"path": str(output.resolve()) if passed else None, "max_abs_err_vs_reference": max_abs,
            "bit_identical": identical, "reference": reference_name, "tol": tol, **stats,
            "inputs": [i.name for i in model.graph.input if i.name not in initializers],
            "outputs": [o.name for o in model.graph.output], **ctx.base()}, passed


def show_export_onnx(r: dict) -> list:
    return ["===== export the rebuilt policy as ONNX (ML-Agents interface, opset 9) =====",
            f"  inputs  = {r['inputs']} | outputs = {r['outputs']}",
            f"  vs {r['reference']}: max_abs_err = {r['max_abs_err_vs_reference']:.3e}"
            + (f" | discrete mismatches = {r['discrete_mismatches']}" if "discrete_mismatches" in r else "")
            + f" | bit-identical = {'yes' if r['bit_identical'] else 'no'}",
            f"  written: {r['path']}" if r["path"] else
            f"  NOT written: the export differs from the reference by more than {r['tol']:g}"]
