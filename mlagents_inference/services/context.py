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
from ..core.sources import ModelSource, find_checkpoint_onnx, locate_model, onnx_alone_source, regular_file
from ..core.spec import PolicySettings

if TYPE_CHECKING:  # (annotations only)
    from ..loaders.checkpoint import LoadedCheckpoint

__all__ = ["Context"]


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
            machine_readable = self.args.json or self.args.mode in (
                "stream",
                "serve",
            )  # stdout is JSON only (serve: unused)
            print(f"[note] {src.note}", file=sys.stderr if machine_readable else sys.stdout)
        onnx = regular_file("--onnx", self.args.onnx) if self.args.onnx else None
        from ..api.policy import load_checkpoint

        return load_checkpoint(
            src.checkpoint, onnx, src.model_dir, src.behavior, self.args.expect_sha256, self.args.goal_input
        )

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

        return Policy(self.checkpoint, **self.policy_options())

    def policy_options(self) -> dict:
        """Policy's arguments after the checkpoint, as the command line gives them (serve's model repository builds
        each version's Policy with them too)."""
        a = self.args
        return {
            "device": self.device,
            "dtype": a.dtype,
            "engine": a.engine,
            "graphs": a.graphs == "on",
            "providers": a.providers,
            "spin": a.spin == "on",
            "compile": a.compile == "on",
            "threads": a.threads,
        }

    def base(self) -> dict:
        return {
            "checkpoint": str(self.checkpoint.path),
            "source": self.source.origin,
            "device": str(self.device),
            "dtype": self.args.dtype,
            "engine": self.engine_name,
        }

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

    def obs_label(self) -> str:
        return self.args.obs if len(self.args.obs) < 24 else "custom"

    def checkpoint_onnx(self) -> Path:
        """The ONNX that belongs to the chosen checkpoint: --onnx, <Behavior>-<step>.onnx beside it,
        or <Behavior>.onnx for the final checkpoint only."""
        if self.args.onnx:
            return regular_file("--onnx", self.args.onnx)
        ckpt, src = self.checkpoint, self.source
        found = find_checkpoint_onnx(ckpt.path, src.model_dir, src.behavior, ckpt.global_step)
        if found is None:
            raise UsageError(
                f"{ckpt.path.name}: no ONNX belongs to this checkpoint (looked for "
                f"{src.behavior or ckpt.path.parent.name}-<step>.onnx beside it and the final "
                f"{src.behavior or ckpt.path.parent.name}.onnx); pass --onnx FILE"
            )
        return found
