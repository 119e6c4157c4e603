"""The onnxruntime engine over ML-Agents' modules: EngineHeads exported once, run by an onnxruntime session
(CPU float32, or execution providers; on the CUDA provider, CUDA graphs of fixed bucket shapes over bound device
buffers)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..core import sessions
from ..core.buckets import bucket_of, bucket_sizes, compiles_per_shape, padded_rows
from ..core.errors import UsageError
from ..core.sessions import onnx_session, runs_cuda_graphs, with_cuda_graph
from ..core.spec import engine_output_names, input_names
from ..model.export import export_engine_onnx
from ..model.networks import EngineHeads

if TYPE_CHECKING:  # (annotations only)
    from ..model.networks import SimpleActor

__all__ = ["OnnxRuntimeEngine", "BoundBuckets"]


class OnnxRuntimeEngine:
    """The same modules exported (deterministic outputs only) and run by onnxruntime on the CPU, float32 only, or on
    execution providers. On the CUDA provider with `graphs`, the session takes enable_cuda_graph and runs through
    BoundBuckets; a session that refuses it (a node the CUDA provider does not take) runs without, said in one line."""

    name = "onnxruntime"
    rows_independent = True  # (a row's outputs do not depend on the other rows of its call)

    def __init__(
        self,
        actor: "SimpleActor",
        providers: Optional[list] = None,
        spin: bool = True,
        graphs: bool = True,
        threads: Optional[int] = None,
    ):
        self.output_names, self.input_names = engine_output_names(actor.settings), input_names(actor.settings)
        model = export_engine_onnx(EngineHeads(actor))
        self.graph_state, self.bound = None, None  # (CUDA graphs: whether they run, and why not)
        cuda = any((p if isinstance(p, str) else p[0]) == "CUDAExecutionProvider" for p in providers or [])
        if cuda and graphs:
            try:
                self.session = onnx_session(model, providers=with_cuda_graph(providers), spin=spin, threads=threads)
            except UsageError as exc:
                self.graph_state = f"off: the CUDA provider refused enable_cuda_graph ({exc})"
                print(f"[note] CUDA graphs off: {self.graph_state[5:]}; running without", file=sys.stderr, flush=True)
                self.session = onnx_session(model, providers=providers, spin=spin, threads=threads)
        else:
            self.session = onnx_session(model, providers=providers, spin=spin, threads=threads)
            self.graph_state = "off (--graphs off)" if cuda else None
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
        if runs_cuda_graphs(self.session):
            self.bound = BoundBuckets(self.session, self.input_names, self.output_names, self.mask_index)
            self.graph_state = "on: onnxruntime captures each bucket on its first call (I/O binding)"
            self.counts = self.bound.counts

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        names = self.output_names if names is None else names
        if self.bound is not None:
            return self.bound.run(flat, names)
        if self.buckets is not None:
            rows = len(flat[0])
            bucket = bucket_of(self.buckets, rows)
            if bucket is not None and bucket != rows:
                out = self._run(names, dict(zip(self.input_names, padded_rows(flat, bucket, self.mask_index))), None)
                return {name: value[:rows] for name, value in zip(names, out)}
        return dict(zip(names, self._run(names, dict(zip(self.input_names, flat)), None)))


class BoundBuckets:
    """onnxruntime's CUDA graphs at fixed batch sizes (core.buckets): for each bucket, device buffers for every input
    and output (OrtValues made once on the provider's card), an I/O binding over them and its own graph id (run option
    gpu_graph_id, the bucket's index + 1). A call's rows are copied into its bucket's input buffers, padded (zeros;
    every action allowed in a mask); onnxruntime captures the bucket's graph (after one ordinary run: the CUDA
    provider's min_num_runs_before_cuda_graph_capture_) and replays it after; the answer is the call's rows of the
    output buffers, copied to the host (arrays of the caller's own). A call beyond the largest bucket runs without a
    graph (gpu_graph_id -1) at its own size. `counts`: buckets bound ("captures": their first call), calls to a bound
    bucket after that ("replays"), calls run without a graph ("eager")."""

    def __init__(self, session, input_names: list, output_names: list, mask_index: Optional[int]):
        self.ort, self.session = sessions.import_onnxruntime(), session
        self.input_names, self.output_names, self.mask_index = input_names, output_names, mask_index
        taken = session.get_provider_options().get("CUDAExecutionProvider", {})
        self.device_id = int(taken.get("device_id", 0))
        self.out_shapes = {o.name: o.shape[1:] for o in session.get_outputs()}
        self.out_types = {o.name: np.int64 if "int64" in o.type else np.float32 for o in session.get_outputs()}
        self.buckets = bucket_sizes()
        self.bound: dict = {}  # bucket -> (binding, input buffers, output buffers, run options)
        self.counts = {"captures": 0, "replays": 0, "eager": 0}

    def _device_value(self, shape: tuple, dtype):
        return self.ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype, "cuda", self.device_id)

    def _bind(self, bucket: int, flat: list) -> tuple:
        binding = self.session.io_binding()
        inputs = [self._device_value((bucket, *x.shape[1:]), np.float32) for x in flat]
        outputs = {n: self._device_value((bucket, *self.out_shapes[n]), self.out_types[n]) for n in self.output_names}
        for name, value in zip(self.input_names, inputs):
            binding.bind_ortvalue_input(name, value)
        for name, value in outputs.items():
            binding.bind_ortvalue_output(name, value)
        options = self.ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(self.buckets.index(bucket) + 1))
        self.bound[bucket] = (binding, inputs, outputs, options)
        return self.bound[bucket]

    def run(self, flat: list, names: list) -> dict:
        rows = len(flat[0])
        bucket = bucket_of(self.buckets, rows)
        if bucket is None:  # (beyond the largest bucket: no graph, onnxruntime's own copies)
            self.counts["eager"] += 1
            options = self.ort.RunOptions()
            options.add_run_config_entry("gpu_graph_id", "-1")
            out = self.session.run(names, dict(zip(self.input_names, flat)), options)
            return dict(zip(names, out))
        captured = bucket in self.bound
        binding, inputs, outputs, options = self.bound.get(bucket) or self._bind(bucket, flat)
        for buffer, x in zip(inputs, padded_rows(flat, bucket, self.mask_index)):
            buffer.update_inplace(np.ascontiguousarray(x, dtype=np.float32))
        self.session.run_with_iobinding(binding, options)
        self.counts["replays" if captured else "captures"] += 1
        return {name: outputs[name].numpy()[:rows].copy() for name in names}
