"""export-onnx: the policy written with ML-Agents' ONNX interface (torch.onnx.export of the same modules, as
ML-Agents exports them), verified against the checkpoint's own ONNX before it is written."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import NotThisPolicy, UsageError
from ..core.files import atomic_write, check_output_path, refuse_same_file
from ..core.observations import random_inputs, random_masks
from ..core.report import parity
from ..core.sessions import onnx_session
from ..core.sources import DEFAULT_EXPORT, mlagents_onnx_files
from ..core.spec import input_names, step_outputs
from ..loaders.onnx_file import MLAgentsOnnx

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = ["mode_export_onnx", "show_export_onnx"]


def mode_export_onnx(ctx: Context):
    """Write the policy with ML-Agents' ONNX interface (torch.onnx.export of the same modules, as
    ML-Agents exports them), verified against the checkpoint's own ONNX before it is written."""
    import onnx

    output = check_output_path(ctx.args.output or DEFAULT_EXPORT, (".onnx",))
    s, ckpt, src = ctx.settings, ctx.checkpoint, ctx.source
    # ML-Agents' own ONNX files of this checkpoint are inputs too, read or not at load time (a
    # policy whose inputs are all normalised never reads them): the export is verified against one.
    theirs = [p for p in mlagents_onnx_files(ckpt.path, src.model_dir, src.behavior, ckpt.global_step) if p.is_file()]
    refuse_same_file(
        output,
        [ckpt.path]
        + ([ckpt.onnx.path] if ckpt.onnx else [])
        + ([Path(ctx.args.onnx)] if ctx.args.onnx else [])
        + theirs,
    )
    from ..model.export import export_mlagents_onnx

    data = export_mlagents_onnx(ckpt.actor)
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model)
    rows = 64
    obs, masks = random_inputs(s, ctx.args.seed, rows), random_masks(s, ctx.args.seed, rows)
    memory = (
        np.random.RandomState(ctx.args.seed + 1).randn(rows, s.memory_size).astype(np.float32)
        if s.memory_size
        else None
    )
    flat, _, _ = ctx.policy.prepare(obs, masks, memory)
    fetch = step_outputs(s, True)
    feed = dict(zip(input_names(s, exported=True), flat))
    mine = dict(zip(fetch, onnx_session(data, tuned=False).run(fetch, feed)))
    reference_path = None
    try:  # another policy's ONNX named with --onnx is a failure (exit 1), never "no ONNX"
        reference_path = ctx.checkpoint_onnx()
        theirs = MLAgentsOnnx(reference_path, s).deterministic(flat)
        reference_name = str(reference_path)
    except (UsageError, NotThisPolicy) as exc:  # no usable ML-Agents ONNX beside the checkpoint: hold it to float64
        if ctx.args.onnx:
            raise
        theirs = ctx.policy.decide({k: np.asarray(v, np.float32) for k, v in ctx.policy.reference(flat).items()}, rows)
        reference_name = (
            "float64 rebuild ("
            + (
                "no ML-Agents ONNX for this checkpoint"
                if reference_path is None
                else f"{reference_path.name} not usable: {exc}"
            )
            + ")"
        )
    ours = ctx.policy.decide(mine, rows)  # the export's deterministic outputs, as actions and memory
    stats = parity(s, ours, theirs)
    max_abs = max([stats.get("max_abs_err", 0.0), stats.get("memory_max_rel_err", 0.0)])
    identical = all(np.array_equal(ours[k], theirs[k]) for k in ours)
    tol = 1e-5  # the export is written only this close to the reference
    passed = max_abs <= tol and stats.get("discrete_mismatches", 0) == 0
    if passed:
        atomic_write(output, lambda tmp: tmp.write_bytes(data))
    initializers = {x.name for x in model.graph.initializer}
    return {
        "path": str(output.resolve()) if passed else None,
        "max_abs_err_vs_reference": max_abs,
        "bit_identical": identical,
        "reference": reference_name,
        "tol": tol,
        **stats,
        "inputs": [i.name for i in model.graph.input if i.name not in initializers],
        "outputs": [o.name for o in model.graph.output],
        **ctx.base(),
    }, passed


def show_export_onnx(r: dict) -> list:
    return [
        "===== export the rebuilt policy as ONNX (ML-Agents interface, opset 9) =====",
        f"  inputs  = {r['inputs']} | outputs = {r['outputs']}",
        f"  vs {r['reference']}: max_abs_err = {r['max_abs_err_vs_reference']:.3e}"
        + (f" | discrete mismatches = {r['discrete_mismatches']}" if "discrete_mismatches" in r else "")
        + f" | bit-identical = {'yes' if r['bit_identical'] else 'no'}",
        f"  written: {r['path']}"
        if r["path"]
        else f"  NOT written: the export differs from the reference by more than {r['tol']:g}",
    ]
