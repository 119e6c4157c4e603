"""The torch engine: ML-Agents' modules (EngineHeads) on a torch device, with device graphs on CUDA/NPU."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Optional

import torch

from ..core.spec import engine_output_names
from ..model.networks import EngineHeads
from .torch_devices import cast_actor

if TYPE_CHECKING:  # (annotations only)
    from ..model.networks import SimpleActor

__all__ = ["TorchEngine"]


class TorchEngine:
    """The policy's modules on cpu/cuda/npu. On CUDA (and on NPU where torch_npu has graph
    capture: not yet run on hardware) each batch size is captured once as a device graph."""

    name = "torch"

    def __init__(self, actor: "SimpleActor", device, dtype: str, graphs: bool = True):
        self.device, self.dtype = device, getattr(torch, dtype)
        self.heads = EngineHeads(cast_actor(copy.deepcopy(actor), self.dtype).to(device)).eval()
        self.output_names = engine_output_names(actor.settings)
        self.graphs: dict = {}
        api = torch.cuda if device.type == "cuda" else getattr(torch, "npu", None) if device.type == "npu" else None
        self.graph_cls = getattr(api, "CUDAGraph" if device.type == "cuda" else "NPUGraph", None) if api else None
        self.graph_api = api if graphs and self.graph_cls is not None and hasattr(api, "graph") else None

    def _forward(self, tensors: list):
        return self.heads(*tensors)

    def _captured(self, shapes: tuple):
        """(static inputs, static outputs, graph) for one set of input shapes, captured on first use."""
        if shapes not in self.graphs and len(self.graphs) < 8:
            static_in = [torch.zeros(shape, device=self.device) for shape in shapes]
            if self.heads.discrete:
                static_in[self.heads.n_inputs] += 1.0  # all allowed while warming up
            stream = self.graph_api.Stream(device=self.device)
            stream.wait_stream(self.graph_api.current_stream(self.device))
            with self.graph_api.stream(stream), torch.inference_mode():
                for _ in range(3):
                    self._forward(static_in)
            self.graph_api.current_stream(self.device).wait_stream(stream)
            graph = self.graph_cls()
            with torch.inference_mode(), self.graph_api.graph(graph):
                static_out = self._forward(static_in)
            self.graphs[shapes] = (static_in, static_out, graph)
        return self.graphs.get(shapes)

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        """Engine inputs (float32 numpy, in input_names order) -> the outputs `names` (all
        by default) as numpy; only those are copied to the host."""
        names = self.output_names if names is None else names
        host = [torch.from_numpy(x if x.flags.writeable else x.copy()) for x in flat]  # e.g. a read-only memory map
        if self.graph_api is not None:
            try:
                captured = self._captured(tuple(tuple(x.shape) for x in flat))
            except Exception:  # capture unsupported here: stay eager from now on
                self.graph_api, captured = None, None
            if captured:
                static_in, static_out, graph = captured
                for dst, src in zip(static_in, host):
                    dst.copy_(src, non_blocking=False)
                graph.replay()
                return self._to_host(static_out, names)
        with torch.inference_mode():
            return self._to_host(self._forward([x.to(self.device) for x in host]), names)

    def _to_host(self, outs, names: list) -> dict:
        """The outputs `names` as numpy (.cpu() waits for the device)."""
        return {name: out.cpu().numpy() for name, out in zip(self.output_names, outs) if name in names}
