"""The onnxruntime engine over ML-Agents' modules: EngineHeads exported once, run by an onnxruntime session
(CPU float32, or execution providers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..core.buckets import bucket_of, bucket_sizes, compiles_per_shape, padded_rows
from ..core.sessions import onnx_session
from ..core.spec import engine_output_names, input_names
from ..model.export import export_engine_onnx
from ..model.networks import EngineHeads

if TYPE_CHECKING:  # (annotations only)
    from ..model.networks import SimpleActor

__all__ = ["OnnxRuntimeEngine"]


class OnnxRuntimeEngine:
    """The same modules exported (deterministic outputs only) and run by onnxruntime on the CPU, float32 only."""

    name = "onnxruntime"

    def __init__(self, actor: "SimpleActor", providers: Optional[list] = None, spin: bool = True):
        self.output_names, self.input_names = engine_output_names(actor.settings), input_names(actor.settings)
        self.session = onnx_session(export_engine_onnx(EngineHeads(actor)), providers=providers, spin=spin)
        self.providers = self.session.get_providers()
        # InferenceSession.run re-checks on every call what is fixed here (input names, OrtValue
        # ownership, graph capture) through pybind properties: 5-10 µs a call once a run has left the
        # caches cold, a tenth of a small visual policy's batch-1 call. The binding's run skips that.
        binding = getattr(self.session, "_sess", None)
        self._run = binding.run if callable(getattr(binding, "run", None)) else self.session.run
        # a provider that compiles a graph for each new input shape (CANN's graph engine) runs at fixed batch sizes:
        # a call's rows padded to their bucket (core.buckets), so the stream's and serve's varying sizes compile
        # one graph a bucket, not one a size
        self.buckets = bucket_sizes() if compiles_per_shape(self.session) else None
        self.mask_index = self.input_names.index("action_masks") if "action_masks" in self.input_names else None

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        names = self.output_names if names is None else names
        if self.buckets is not None:
            rows = len(flat[0])
            bucket = bucket_of(self.buckets, rows)
            if bucket is not None and bucket != rows:
                out = self._run(names, dict(zip(self.input_names, padded_rows(flat, bucket, self.mask_index))), None)
                return {name: value[:rows] for name, value in zip(names, out)}
        return dict(zip(names, self._run(names, dict(zip(self.input_names, flat)), None)))
