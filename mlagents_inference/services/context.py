"""The run context of one command (the source, checkpoint, device, engine and policy, each made once), the
ONNX that belongs to its checkpoint, and the small helpers the modes' results share."""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..api.policy import Policy
from ..core.errors import UsageError
from ..core.inputs import parse_obs
from ..core.observations import parse_numbers
from ..core.report import floats, fmt
from ..core.sources import ModelSource, find_checkpoint_onnx, locate_model, onnx_alone_source, regular_file
from ..core.spec import PolicySettings, continuous_only

if TYPE_CHECKING:  # (annotations only)
    from ..loaders.checkpoint import LoadedCheckpoint



@dataclass
class Context:
    args: argparse.Namespace

    @cached_property
    def source(self) -> ModelSource:
        a = self.args
        if a.onnx and not (a.checkpoint or a.model_dir or a.model or os.environ.get("HUGGY_MODEL_DIR")):
            return onnx_alone_source("--onnx", Path(a.onnx))
        return locate_model(a.checkpoint, a.model_dir, a.model)

    @cached_property
    def checkpoint(self) -> LoadedCheckpoint:
        src = self.source
        if src.note:
            machine_readable = self.args.json or self.args.mode in ("stream", "serve")  # stdout is JSON only (serve: unused)
            print(f"[note] {src.note}", file=sys.stderr if machine_readable else sys.stdout)
        onnx = regular_file("--onnx", self.args.onnx) if self.args.onnx else None
        from ..loaders.policy_files import load_checkpoint
        return load_checkpoint(src.checkpoint, onnx, src.model_dir, src.behavior, self.args.expect_sha256,
                               self.args.goal_input)

    @property
    def settings(self) -> PolicySettings:
        return self.checkpoint.settings

    @cached_property
    def device(self):
        from ..engines.factory import pick_device
        return pick_device(self.args.device, self.args.engine, self.args.providers)

    @cached_property
    def engine_name(self) -> str:
        from ..engines.factory import engine_name
        return engine_name(self.device, self.args.engine, self.args.dtype)

    @cached_property
    def policy(self) -> Policy:
        from ..api.policy import Policy
        return Policy(self.checkpoint, self.device, self.args.dtype, self.args.engine, self.args.graphs == "on",
                      providers=self.args.providers, spin=self.args.spin == "on")

    def base(self) -> dict:
        return {"checkpoint": str(self.checkpoint.path), "source": self.source.origin, "device": str(self.device),
                "dtype": self.args.dtype, "engine": self.engine_name}

    def obs(self) -> list:
        return parse_obs(self.args.obs, self.settings, self.args.seed, self.policy.normalizers)

    def masks(self) -> Optional[np.ndarray]:
        if self.args.mask is None:
            return None
        if not self.settings.discrete_branches:
            raise UsageError("--mask: this policy has no discrete actions")
        return parse_numbers(self.args.mask, "--mask", sum(self.settings.discrete_branches))

    def memory(self) -> Optional[np.ndarray]:
        if self.args.memory is None:
            return None
        if not self.settings.memory_size:
            raise UsageError("--memory: this policy has no memory (LSTM)")
        return parse_numbers(self.args.memory, "--memory", self.settings.memory_size)



def action_fields(settings: PolicySettings, out: dict) -> dict:
    """An action result for JSON: ML-Agents' output names; a continuous-only policy keeps 'actions'."""
    fields = {}
    if "continuous_actions" in out:
        fields["continuous_actions"] = floats(out["continuous_actions"])
        if continuous_only(settings):
            fields["actions"] = fields["continuous_actions"]
    if "discrete_actions" in out:
        fields["discrete_actions"] = np.asarray(out["discrete_actions"]).tolist()
    if "memory" in out:
        fields["memory"] = floats(out["memory"])
    return fields



def actions_ok(settings: PolicySettings, out: dict, deterministic: bool = True) -> bool:
    """Finite, continuous in [-1, 1] (except SAC's deterministic raw mu), discrete within each branch."""
    ok = True
    if "continuous_actions" in out:
        c = np.asarray(out["continuous_actions"])
        ok &= bool(np.isfinite(c).all()) and (settings.tanh_squash and deterministic or bool(np.all(np.abs(c) <= 1.0)))
    if "discrete_actions" in out:
        d = np.asarray(out["discrete_actions"]).reshape(-1, len(settings.discrete_branches))
        ok &= bool(((d >= 0) & (d < np.asarray(settings.discrete_branches))).all())
    if "memory" in out:
        ok &= bool(np.isfinite(out["memory"]).all())
    return ok



def action_lines(r: dict, prefix: str = "", label: str = "action") -> list:
    """The human lines of one action (the continuous lines keep the original NPU adaptation's labels)."""
    lines = []
    if prefix + "continuous_actions" in r:
        c = np.asarray(r[prefix + "continuous_actions"], np.float32)
        lines.append(f"  {label + '[:8]':<14} = {fmt(c[:8])}")
        lines.append(f"  {label + ' range':<14} = [{c.min():.4f}, {c.max():.4f}]"
                     + (" (SAC: raw mu, as ML-Agents' ONNX)" if r.get("sac") else " (must lie in [-1, 1])"))
    if prefix + "discrete_actions" in r:
        lines.append(f"  discrete_actions = {r[prefix + 'discrete_actions']} (branches {r['discrete_branches']})")
    if prefix + "memory" in r:
        lines.append(f"  next memory[:8] = {fmt(np.asarray(r[prefix + 'memory'])[:8])}")
    return lines



def kind_fields(s: PolicySettings) -> dict:
    """What the renderers need to know about the policy's actions."""
    return {"discrete_branches": list(s.discrete_branches), "sac": s.tanh_squash}



def obs_label(ctx: Context) -> str:
    return ctx.args.obs if len(ctx.args.obs) < 24 else "custom"



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

