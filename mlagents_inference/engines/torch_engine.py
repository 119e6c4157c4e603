"""The torch engine: ML-Agents' modules (EngineHeads) on a torch device, with device graphs on CUDA/NPU: a fixed set of
bucket sizes (vLLM's and SGLang's scheme), each captured once on the engine's own card on its first call and checked
against eager before it is used; a call's rows padded to its bucket and the answer sliced; copies through pinned host
buffers on the engine's own stream, one wait per call; what ran counted and reported."""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import sys
from typing import TYPE_CHECKING, Optional

import torch

from ..core.buckets import MAX_BUCKET, bucket_of, bucket_sizes
from ..core.spec import engine_output_names
from ..model.export import dummy_inputs
from ..model.networks import EngineHeads
from .torch_devices import cast_actor, check_dtype, device_api, float32_report, full_float32

if TYPE_CHECKING:  # (annotations only)
    from ..model.networks import SimpleActor

__all__ = ["GRAPH_TOLERANCE", "PROBE_ROWS", "capture_refused", "compile_backend", "cpu_threads", "TorchEngine"]

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


PROBE_ROWS = (1, 5)  # the compiled module's checks: batch 1 (specialised by torch.compile) and a dynamic batch


def compile_backend(device) -> tuple:
    """(torch.compile's backend for `device`, None) or (None, why it cannot compile there), known before compiling:
    inductor on the CPU (it needs a C++ compiler: $CXX, else c++/g++/clang++ as torch's cpp_builder looks for one) and
    on CUDA; torch_npu's graph mode (torchair.get_npu_backend, GE graphs) on an NPU where torchair is importable."""
    if device.type == "npu":
        try:
            import torchair
        except Exception as exc:  # (not installed, or not this torch_npu's)
            return None, f"torchair (torch_npu's graph mode) is not importable ({type(exc).__name__}: {exc})"
        return torchair.get_npu_backend(compiler_config=torchair.CompilerConfig()), None
    if device.type == "cpu" and not any(
        shutil.which(name) for name in [os.environ.get("CXX", ""), "c++", "g++", "clang++"] if name
    ):
        return None, "no C++ compiler (c++, g++, clang++ or $CXX) for torch.compile's CPU code"
    if device.type not in ("cpu", "cuda"):
        return None, f"torch.compile is not offered on {device.type}"
    return "inductor", None


class TorchEngine:
    """The policy's modules on cpu/cuda/npu. On CUDA and NPU (where torch_npu has NPUGraph) a call's rows are padded to
    their bucket (bucket_sizes) and each bucket is captured once as a device graph on the engine's card, on its first
    call, replayed once and compared with eager, and used from then on; a capture that fails or differs turns graphs
    off for the engine, said in one line and in `graph_state`. On a card the inputs go through pinned host buffers made
    once per bucket, copied in and out on the engine's own stream without blocking, with one wait per call; each
    answer is a pinned host tensor of its own (torch's caching host allocator reuses the block only once the caller
    lets go of the array). `counts`: captures, calls answered by a replay, calls run eager. Not run on an accelerator
    here (docs/accelerators.md)."""

    name = "torch"
    rows_independent = False  # (not held to it: kernels and a card's graph buckets may change with the call's rows)

    def __init__(
        self,
        actor: "SimpleActor",
        device,
        dtype: str,
        graphs: bool = True,
        max_bucket: int = MAX_BUCKET,
        compile: bool = False,
        threads: Optional[int] = None,
    ):
        check_dtype(device, dtype)
        self.threads = threads if device.type == "cpu" else None  # (torch's intra-op threads during a CPU call)
        full_float32(device)  # (also for a torch.device handed in directly, which resolve_device never saw)
        self.device, self.dtype = device, getattr(torch, dtype)
        self.heads = EngineHeads(cast_actor(copy.deepcopy(actor), self.dtype).to(device)).eval()
        self.output_names = engine_output_names(actor.settings)
        self.graphs: dict = {}  # bucket -> (static inputs, static outputs, graph)
        self.staging: dict = {}  # bucket -> pinned host inputs (a card's)
        self.buckets = bucket_sizes(max_bucket)
        self.counts = {"captures": 0, "replays": 0, "eager": 0}
        self.tolerance = GRAPH_TOLERANCE.get(dtype, 1e-2)
        self.api = api = device_api(device)
        self.stream = None  # the engine's own stream on its card (made on the first call there)
        self.device_calls = False  # whether run_device has run (on the caller's stream)
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
                self.graph_api, self.graph_state = api, "on: each bucket is captured on its first call"
        self.precision = float32_report(device, dtype)
        self.compiled, self.compile_state = None, None  # compile_state (asked for): whether it runs, and why not
        if compile:
            self._compile()

    def _compile(self) -> None:
        """torch.compile of the heads (every output, so that the names asked for never recompile it), used only once
        it has answered as eager within the tolerance on a probe batch of PROBE_ROWS rows each (the compile happens
        there); any failure leaves the engine eager, said in one line and in `compile_state`."""
        backend, refused = compile_backend(self.device)
        if refused:
            return self._no_compile(refused)
        try:
            compiled = torch.compile(self.heads, backend=backend, dynamic=None)
            generator = torch.Generator().manual_seed(0)
            worst = 0.0
            for rows in PROBE_ROWS:
                obs, masks, memories = dummy_inputs(self.heads.actor.settings, rows)
                probe = [torch.randn(x.shape, generator=generator) for x in obs]
                probe += [masks] if self.heads.discrete else []
                probe += [0.5 * torch.randn(memories.shape, generator=generator)] if self.heads.memory else []
                probe = [x.to(self.device) for x in probe]
                with torch.inference_mode():
                    worst = max(worst, _differs(compiled(*probe), self.heads(*probe), self.tolerance))
        except Exception as exc:  # (no compiler, a graph break it cannot take, an error in generated code)
            return self._no_compile(f"torch.compile failed on {self.device} ({_one_line(exc)})")
        if worst:
            return self._no_compile(f"the compiled module answered {worst:.3g} away from eager on {self.device}")
        self.compiled = compiled
        how = "torchair" if self.device.type == "npu" else "torch.compile"
        self.compile_state = f"on: {how}, answered as eager on {len(PROBE_ROWS)} probe batches"

    def _no_compile(self, reason: str) -> None:
        self.compiled, self.compile_state = None, f"off: {reason}"
        print(f"[note] compile off: {reason}; running eager", file=sys.stderr, flush=True)

    def _forward(self, tensors: list, names: Optional[list] = None):
        """The engine outputs `names` (all by default, as a capture needs them), in engine_output_names order, from one
        pass of the network: eager calls compute only what they are asked for; the compiled module computes all of
        them (one compiled graph whatever is asked), and a failure there turns it off and runs eager."""
        if self.compiled is not None:
            try:
                outs = self.compiled(*tensors)
            except Exception as exc:  # (e.g. a recompile for a new shape that fails)
                self._no_compile(f"torch.compile failed on {self.device} ({_one_line(exc)})")
            else:
                return outs if names is None else tuple(outs[self.output_names.index(name)] for name in names)
        return self.heads(*tensors) if names is None else self.heads(*tensors, names=names)

    def wanted(self, names: list) -> list:
        return [name for name in self.output_names if name in names]

    def pinned(self, shape, dtype=torch.float32):
        """An empty page-locked host tensor (torch's caching host allocator: a freed block is reused)."""
        return torch.empty(shape, dtype=dtype, pin_memory=True)

    def bucket_of(self, rows: int) -> Optional[int]:
        """The bucket a call of `rows` rows runs in: the smallest bucket size >= rows; None beyond the largest."""
        return bucket_of(self.buckets, rows)

    def _staged(self, bucket: int, flat: list) -> list:
        """The bucket's pinned host inputs (made once): a row for each of its `bucket` rows, the padding rows zeros
        (all actions allowed in a mask, so a padded row computes like any other)."""
        staged = self.staging.get(bucket)
        if staged is None:
            staged = [self.pinned((bucket, *x.shape[1:])) for x in flat]
            for i, buffer in enumerate(staged):
                buffer.fill_(1.0 if self.heads.discrete and i == self.heads.n_inputs else 0.0)
            self.staging[bucket] = staged
        return staged

    def _own_stream(self):
        if self.stream is None:
            self.stream = self.api.Stream(device=self.card)
        return self.stream

    def _capture(self, bucket: int, padded: list, inputs: list):
        """(static inputs, static outputs, graph) for one bucket, or None with graphs off from now on; `padded` (the
        bucket's rows: pinned host or on the card) holds the call's `inputs` (its own rows, host or card) and padding.
        torch.cuda.graph and torch_npu's graph make their default capture stream on the *current* card and cache it
        on the class, NPUGraph::capture_begin records capture_dev_ = current_device(), and work on another card's
        stream is not captured: the graph would replay nothing. So warm-up, capture and the check run inside the
        card's context, on a capture stream of that card passed explicitly; an outer stream context restores the
        card's stream where graph.__enter__ fails half-way (it enters its stream before capture_begin, which can
        raise)."""
        api, device = self.graph_api, self.device
        try:
            with api.device(self.card):
                static_in = [torch.zeros(x.shape, device=device) for x in padded]
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
                self._own_stream().wait_stream(capture)
                differs = self._replay_differs(static_in, static_out, graph, padded, inputs)
        except Exception as exc:  # (a capture this device, driver or torch build cannot do)
            return self._refuse(f"capture failed on {device} ({_one_line(exc)})")
        if differs:
            return self._refuse(f"the captured graph replayed {differs:.3g} away from eager on {device}")
        self.graphs[bucket] = (static_in, static_out, graph)
        self.counts["captures"] += 1
        self.graph_state = f"on: captured for buckets {', '.join(str(b) for b in sorted(self.graphs))}"
        return self.graphs[bucket]

    def _replay_differs(self, static_in: list, static_out, graph, padded: list, inputs: list) -> float:
        """The replay of a new capture on the whole padded bucket `padded` against eager on the call's own rows
        `inputs` (tensors): 0.0 where the call's rows agree within the tolerance, else the largest difference (inf
        where one is nan and the other not)."""
        with self.api.stream(self._own_stream()):
            for dst, src in zip(static_in, padded):
                dst.copy_(src, non_blocking=True)
            graph.replay()
        self.stream.synchronize()
        rows = inputs[0].shape[0]
        with torch.inference_mode():
            eager = self._forward([x.to(self.device) for x in inputs])
        return _differs([out[:rows] for out in static_out], eager, self.tolerance)

    def _refuse(self, reason: str) -> None:
        self.graph_api, self.graph_state = None, f"off: {reason}"
        print(f"[note] device graphs off: {reason}; running eager", file=sys.stderr, flush=True)
        return None

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        """Engine inputs (float32 numpy, in input_names order) -> the outputs `names` (all by default) as numpy; only
        those are copied to the host. Each answer's arrays are the caller's own: no later call writes into them."""
        names = self.output_names if names is None else names
        flat = [x if x.flags.writeable else x.copy() for x in flat]  # (e.g. a read-only memory map)
        if self.api is None:  # the CPU: no copies, no waits
            self.counts["eager"] += 1
            wanted = self.wanted(names)
            with torch.inference_mode(), cpu_threads(self.threads):
                outs = self._forward([torch.from_numpy(x) for x in flat], wanted)
            return {name: out.numpy() for name, out in zip(wanted, outs)}
        rows = flat[0].shape[0]
        bucket = self.bucket_of(rows)
        with self.api.device(self.card):  # (in the card's context, as captured)
            if bucket is None:  # beyond the largest bucket: pageable memory, eager
                return self._eager([torch.from_numpy(x) for x in flat], rows, names)
            staged = self._staged(bucket, flat)
            for buffer, x in zip(staged, flat):
                buffer[:rows].copy_(torch.from_numpy(x))  # (host to pinned host: the card is not waited for)
            captured = self.graphs.get(bucket)
            if captured is None and self.graph_api is not None:
                captured = self._capture(bucket, staged, [buffer[:rows] for buffer in staged])
                if captured is not None:  # (its check has just replayed it on these inputs)
                    self.counts["replays"] += 1
                    with self.api.stream(self.stream):
                        return self._to_host(captured[1], rows, names)
            if captured is None or self.graph_api is None:
                return self._eager([buffer[:rows] for buffer in staged], rows, names)
            static_in, static_out, graph = captured
            self.counts["replays"] += 1
            with self.api.stream(self._own_stream()):
                if self.device_calls:  # (the static buffers were last used on the caller's stream)
                    self.stream.wait_stream(self.api.current_stream(self.card))
                for dst, src in zip(static_in, staged):
                    dst[:rows].copy_(src[:rows], non_blocking=True)  # (the padding rows: whatever they last held)
                graph.replay()
                return self._to_host(static_out, rows, names)

    def _eager(self, host: list, rows: int, names: list) -> dict:
        self.counts["eager"] += 1
        with self.api.stream(self._own_stream()), torch.inference_mode():
            wanted = self.wanted(names)
            outs = self._forward([x.to(self.device, non_blocking=True) for x in host], wanted)
            return self._to_host(outs, rows, wanted, produced=wanted)

    def _to_host(self, outs, rows: int, names: list, produced: Optional[list] = None) -> dict:
        """The first `rows` rows of the outputs `names`, copied without blocking into pinned host tensors of their
        own on the current (the engine's) stream, then one wait for that stream."""
        picked = [(name, out[:rows]) for name, out in zip(produced or self.output_names, outs) if name in names]
        host = {name: self.pinned(out.shape, out.dtype) for name, out in picked}
        for name, out in picked:
            host[name].copy_(out, non_blocking=True)
        self.stream.synchronize()
        return {name: out.numpy() for name, out in host.items()}

    def run_device(self, tensors: list, names: Optional[list] = None) -> dict:
        """Engine inputs already on the engine's device (float32 tensors, checked) -> the outputs `names` as tensors
        on that device, each the caller's own (no later call writes into it): no host copy and no wait. On a card
        the work runs on the caller's current stream, in order with what made the inputs; a bucket not yet captured
        is captured from these rows (its check waits, once)."""
        names = self.output_names if names is None else names
        rows = tensors[0].shape[0]
        if self.api is None:
            self.counts["eager"] += 1
            with torch.inference_mode(), cpu_threads(self.threads):
                outs = self._forward(tensors, self.wanted(names))
            return dict(zip(self.wanted(names), outs))
        self.device_calls = True
        bucket = self.bucket_of(rows)
        with self.api.device(self.card), torch.inference_mode():
            captured = self.graphs.get(bucket)
            if captured is None and bucket is not None and self.graph_api is not None:
                padded = [torch.zeros((bucket, *x.shape[1:]), device=self.device) for x in tensors]
                for i, (buffer, x) in enumerate(zip(padded, tensors)):
                    if self.heads.discrete and i == self.heads.n_inputs:
                        buffer.fill_(1.0)  # (padding rows allow every action)
                    buffer[:rows].copy_(x)
                self._own_stream().wait_stream(self.api.current_stream(self.card))  # (the check copies them there)
                captured = self._capture(bucket, padded, tensors)
                if captured is not None:
                    self.api.current_stream(self.card).wait_stream(self.stream)
                    self.counts["replays"] += 1
                    return self._sliced(captured[1], rows, names)
            if captured is None or self.graph_api is None:
                self.counts["eager"] += 1
                outs = self._forward(tensors, self.wanted(names))
                return dict(zip(self.wanted(names), outs))
            static_in, static_out, graph = captured
            self.counts["replays"] += 1
            for dst, src in zip(static_in, tensors):
                dst[:rows].copy_(src, non_blocking=True)
            graph.replay()
            return self._sliced(static_out, rows, names)

    def _sliced(self, outs, rows: int, names: list) -> dict:
        """The first `rows` rows of the static outputs `names`, copied on the card (the next replay overwrites them)."""
        return {name: out[:rows].clone() for name, out in zip(self.output_names, outs) if name in names}


@contextlib.contextmanager
def cpu_threads(threads: Optional[int]):
    """torch's intra-op threads set to `threads` for the block and restored after (the caller's own torch work keeps
    its count); nothing where None. torch's CPU operators wait at an OpenMP barrier for every thread: on a loaded
    machine a descheduled one stalls each operator (docs/performance.md, issue 41)."""
    before = torch.get_num_threads() if threads else None
    if threads and threads != before:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if threads and threads != before:
            torch.set_num_threads(before)


def _one_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _differs(outs, reference, tolerance: float) -> float:
    """0.0 where every output of `outs` agrees with `reference` within `tolerance` relative to max(1, |reference|)
    (nan where the reference has nan), else the largest difference (inf where one is nan and the other not)."""
    worst = 0.0
    for a, b in zip(outs, reference):
        a, b = a.detach().double().cpu(), b.detach().double().cpu()
        if not torch.equal(torch.isnan(a), torch.isnan(b)):
            return float("inf")
        diff = ((a - b).abs() / b.abs().clamp(min=1.0)).nan_to_num(0.0)
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
    return worst if worst > tolerance else 0.0
