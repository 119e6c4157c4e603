"""The export as ML-Agents' ModelSerializer does it (torch.onnx.export, the TorchScript exporter, opset 9, its
names), of the actor and of the engines' heads."""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import TYPE_CHECKING

import torch

from ..core.spec import PolicySettings, engine_output_names, input_names, mlagents_output_names

if TYPE_CHECKING:  # (annotations only)
    from .networks import EngineHeads, SimpleActor

__all__ = ["dummy_inputs", "export_mlagents_onnx", "export_engine_onnx"]


def dummy_inputs(settings: PolicySettings, rows: int = 1):
    """ModelSerializer's dummy input: zeros per observation, all-allowed masks, zero memories."""
    obs = [torch.zeros((rows, *spec.shape)) for spec in settings.inputs]
    return obs, torch.ones(rows, sum(settings.discrete_branches)), torch.zeros(rows, 1, settings.memory_size)


def _quiet_onnx_export(module, args: tuple, **kwargs) -> bytes:
    """torch.onnx.export to bytes with the TorchScript exporter (ML-Agents' own), its warnings silenced."""
    import logging

    buffer, previous = io.BytesIO(), logging.getLogger("torch.onnx").level
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            try:
                torch.onnx.export(module, args, buffer, dynamo=False, **kwargs)
            except TypeError:  # a torch without the dynamo switch: the TorchScript exporter is the only one
                torch.onnx.export(module, args, buffer, **kwargs)
    finally:
        logging.getLogger("torch.onnx").setLevel(previous)
    return buffer.getvalue()


def export_mlagents_onnx(actor: "SimpleActor") -> bytes:
    """The policy with ML-Agents' ONNX interface (opset 9, its input and output names), exactly
    as mlagents-learn writes <Behavior>.onnx; unused inputs are dropped as there."""
    s = actor.settings
    names = input_names(s, exported=True, declared=True)
    dynamic_axes = {name: {0: "batch"} for name in names + ["continuous_actions", "discrete_actions"]}
    return _quiet_onnx_export(
        actor,
        dummy_inputs(s),
        opset_version=9,
        input_names=names,
        output_names=mlagents_output_names(s),
        dynamic_axes=dynamic_axes,
    )


def export_engine_onnx(heads: "EngineHeads") -> bytes:
    """The deterministic-only graph of the same modules, for the onnxruntime engine."""
    s = heads.actor.settings
    obs, masks, memories = dummy_inputs(s)
    args = tuple(obs) + ((masks,) if s.discrete_branches else ()) + ((memories,) if s.memory_size else ())
    names, outputs = input_names(s), engine_output_names(s)
    return _quiet_onnx_export(
        heads,
        args,
        opset_version=13,
        input_names=names,
        output_names=outputs,
        dynamic_axes={name: {0: "batch"} for name in names + outputs},
    )
