"""The torch engine: ML-Agents' modules (EngineHeads) on a torch device, with device graphs on CUDA/NPU: each batch size
captured once on the engine's own card, checked against eager before it is used, and what runs reported."""

from __future__ import annotations

import copy
import os
import sys
from typing import TYPE_CHECKING, Optional

import torch

from ..core.spec import engine_output_names
from ..model.networks import EngineHeads
from .torch_devices import cast_actor, check_dtype, device_api, float32_report, full_float32

if TYPE_CHECKING:  # (annotations only)
    from ..model.networks import SimpleActor

__all__ = ["MAX_GRAPHS", "GRAPH_TOLERANCE", "capture_refused", "TorchEngine"]

MAX_GRAPHS = 8  # batch sizes captured per engine; the others run eager
GRAPH_TOLERANCE = {"float32": 1e-5}  # a replay's largest difference from eager, relative to max(1, |eager|); 1e-2 else


def capture_refused(device) -> Optional[str]:
    """Why graph capture cannot run on `device` whatever is captured, known before trying: torch_npu's
    NPUGraph::capture_begin refuses TASK_QUEUE_ENABLE=2 ("Do not support TASK_QUEUE_ENABLE = 2 during NPU graph
    capture"; OptionsManager reads the variable once, and ASCEND_LAUNCH_BLOCKING=1 turns the queue off)."""
    if (
        device.type == "npu"
        and os.environ.get("TASK_QUEUE_ENABLE", "").strip() == "2"
        and os.environ.get("ASCEND_LAUNCH_BLOCKING", "").strip() != "1"
    ):
        return (
            "torch_npu refuses graph capture under TASK_QUEUE_ENABLE=2 (TASK_QUEUE_ENABLE=1, its default, or 0 "
            "lets graphs run)"
        )
    return None


class TorchEngine:
    """The policy's modules on cpu/cuda/npu. On CUDA and NPU (where torch_npu has NPUGraph) each batch size is captured
    once as a device graph on the engine's card, replayed once and compared with eager, and used from then on; a
    capture that fails or differs turns graphs off for the engine, said in one line and in `graph_state`. Not run on
    an accelerator here (docs/accelerators.md)."""

    name = "torch"

    def __init__(self, actor: "SimpleActor", device, dtype: str, graphs: bool = True):
        check_dtype(device, dtype)
        full_float32(device)  # (also for a torch.device handed in directly, which resolve_device never saw)
        self.device, self.dtype = device, getattr(torch, dtype)
        self.heads = EngineHeads(cast_actor(copy.deepcopy(actor), self.dtype).to(device)).eval()
        self.output_names = engine_output_names(actor.settings)
        self.graphs: dict = {}
        self.tolerance = GRAPH_TOLERANCE.get(dtype, 1e-2)
        api = device_api(device)
        kind = "CUDAGraph" if device.type == "cuda" else "NPUGraph"
        self.graph_cls = getattr(api, kind, None) if api is not None else None
        self.card = device.index if device.index is not None or api is None else api.current_device()
        self.graph_api, self.graph_state = None, None  # graph_state: whether graphs run here, and why not
        if api is not None:
            refused = capture_refused(device)
            if not graphs:
                self.graph_state = "off (--graphs off)"
            elif self.graph_cls is None or not hasattr(api, "graph"):
                self.graph_state = f"off: this {'torch' if device.type == 'cuda' else 'torch_npu'} has no {kind}"
            elif refused:
                self.graph_state = f"off: {refused}"
            else:
                self.graph_api, self.graph_state = api, "on: each batch size is captured on its first call"
        self.precision = float32_report(device, dtype)

    def _forward(self, tensors: list):
        return self.heads(*tensors)

    def _capture(self, shapes: tuple, host: list):
        """(static inputs, static outputs, graph) for one set of input shapes, or None with graphs off from now on.
        torch.cuda.graph and torch_npu's graph make their default capture stream on the *current* card and cache it on
        the class, NPUGraph::capture_begin records capture_dev_ = current_device(), and work on another card's stream
        is not captured: the graph would replay nothing. So warm-up, capture and the check run inside the card's
        context, on a capture stream of that card passed explicitly; an outer stream context restores the card's
        stream where graph.__enter__ fails half-way (it enters its stream before capture_begin, which can raise)."""
        api, device = self.graph_api, self.device
        try:
            with api.device(self.card):
                static_in = [torch.zeros(shape, device=device) for shape in shapes]
                if self.heads.discrete:
                    static_in[self.heads.n_inputs] += 1.0  # all allowed while warming up
                side = api.Stream(device=self.card)  # (streams and contexts by the card's index: torch.cuda and
                side.wait_stream(api.current_stream(self.card))  # torch.npu take an int as well as a device)
                with api.stream(side), torch.inference_mode():
                    for _ in range(3):
                        self._forward(static_in)
                api.current_stream(self.card).wait_stream(side)
                graph, capture = self.graph_cls(), api.Stream(device=self.card)
                with api.stream(capture):
                    with torch.inference_mode(), api.graph(graph, stream=capture):
                        static_out = self._forward(static_in)
                differs = self._replay_differs(static_in, static_out, graph, host)
        except Exception as exc:  # (a capture this device, driver or torch build cannot do)
            return self._refuse(
                f"capture failed on {device} ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
            )
        if differs:
            return self._refuse(f"the captured graph replayed {differs:.3g} away from eager on {device}")
        self.graphs[shapes] = (static_in, static_out, graph)
        self.graph_state = f"on: captured for batch sizes {', '.join(str(s[0][0]) for s in self.graphs)}"
        return self.graphs[shapes]

    def _replay_differs(self, static_in: list, static_out, graph, host: list) -> float:
        """The replay of a new capture on `host` against eager on the same inputs: 0.0 where they agree within the
        tolerance, else the largest difference (inf where one is nan and the other not)."""
        for dst, src in zip(static_in, host):
            dst.copy_(src)
        graph.replay()
        with torch.inference_mode():
            eager = self._forward([x.to(self.device) for x in host])
        worst = 0.0
        for replayed, direct in zip(static_out, eager):
            a, b = replayed.detach().double().cpu(), direct.detach().double().cpu()
            if not torch.equal(torch.isnan(a), torch.isnan(b)):
                return float("inf")
            diff = ((a - b).abs() / b.abs().clamp(min=1.0)).nan_to_num(0.0)
            worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        return worst if worst > self.tolerance else 0.0

    def _refuse(self, reason: str) -> None:
        self.graph_api, self.graph_state = None, f"off: {reason}"
        print(f"[note] device graphs off: {reason}; running eager", file=sys.stderr, flush=True)
        return None

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        """Engine inputs (float32 numpy, in input_names order) -> the outputs `names` (all
        by default) as numpy; only those are copied to the host."""
        names = self.output_names if names is None else names
        host = [torch.from_numpy(x if x.flags.writeable else x.copy()) for x in flat]  # e.g. a read-only memory map
        if self.graph_api is not None:
            shapes = tuple(tuple(x.shape) for x in flat)
            captured = self.graphs.get(shapes)
            if captured is None and len(self.graphs) < MAX_GRAPHS:
                captured = self._capture(shapes, host)
                if captured is not None:  # (its check has just replayed it on these inputs)
                    return self._to_host(captured[1], names)
            if captured is not None:
                static_in, static_out, graph = captured
                with self.graph_api.device(self.card):  # (replayed in the card's context, as captured)
                    for dst, src in zip(static_in, host):
                        dst.copy_(src, non_blocking=False)
                    graph.replay()
                    return self._to_host(static_out, names)
        wanted = [name for name in self.output_names if name in names]  # eager computes only these, once
        with torch.inference_mode():
            outs = self.heads(*[x.to(self.device) for x in host], names=wanted)
            return {name: out.cpu().numpy() for name, out in zip(wanted, outs)}

    def _to_host(self, outs, names: list) -> dict:
        """The outputs `names` as numpy (.cpu() waits for the device)."""
        return {name: out.cpu().numpy() for name, out in zip(self.output_names, outs) if name in names}
