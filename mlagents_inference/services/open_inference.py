"""The Open Inference Protocol (KServe V2, as Triton speaks it) for one policy: the model as V2 sees it (its
ML-Agents ONNX's inputs and outputs, named as the file names them), a request's tensors read and checked into the
engine's arrays (a Job, answered in serve's answering pass with the JSON lines), the answer's tensors, the model
configuration and statistics Triton's perf_analyzer reads, and the REST encoding with Triton's binary tensor data
extension beside the gRPC one (ModelInferRequest's tensors in, raw_output_contents out), as KServe keeps its codecs
side by side in infer_type.py. Transports (aiohttp, grpcio, Ray Serve) are the fronts'; nothing here imports them
(the gRPC messages are handed in); services.dataplane answers the V2 routes on these. docs/serve.md.

Names and shapes follow ML-Agents' ONNX export (Apache-2.0): obs_0 ..., action_masks, recurrent_in;
deterministic_continuous_actions, continuous_actions, deterministic_discrete_actions, discrete_actions,
recurrent_out."""

from __future__ import annotations

import itertools
import json
import math
import time
from typing import TYPE_CHECKING, Optional

import numpy as np

from .. import __version__
from ..api.contract import check_seed
from ..core.errors import UsageError
from ..core.spec import engine_output_names
from .errors import BadRequest, NotFound, RequestError

if TYPE_CHECKING:  # (annotations only)
    from ..api.policy import Policy
    from ..core.observations import AgentMemories

__all__ = [
    "SERVER_NAME",
    "EXTENSIONS",
    "V2_SCOPE",
    "SEQUENCE_ID_CHARS",
    "MAX_ROWS",
    "DTYPES",
    "CONTENTS",
    "shown_sequence",
    "ModelView",
    "Job",
    "Statistics",
    "tensor_array",
    "read_request",
    "rest_request",
    "rest_answer",
    "grpc_parameters",
    "grpc_request",
    "grpc_answer",
    "grpc_stream_answer",
    "WIRE_KEPT",
    "claim_memories",
    "owner_of",
]


SERVER_NAME = "mlagents-inference"


EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "sequence"]  # (GET /v2 lists them)


V2_SCOPE = "v2:"  # the prefix of every V2 sequence's memory scope: "v2:" + its owner (open_inference.owner_of)


SEQUENCE_ID_CHARS = 256  # the longest string sequence_id (as the JSON lines' "id")


MAX_ROWS = 65_536  # the most rows one request may carry (the model configuration's max_batch_size)


DTYPES = {  # V2 datatype -> numpy dtype (little-endian, as the binary extension and raw contents carry them)
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}


CONTENTS = {  # V2 datatype -> its field of InferTensorContents (gRPC's typed contents, where raw contents are not used)
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


def _brief(value, n: int = 40) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


class ModelView:
    """The policy as V2 sees it: its ML-Agents ONNX's inputs (a leading batch dimension -1) and the outputs its kind
    has; the model is the behaviour name, version "1"."""

    version = "1"

    def __init__(self, policy: Policy, name: Optional[str] = None, version: Optional[str] = None):
        s = self.settings = policy.settings
        self.policy, self.name = policy, str(policy.info["behavior"]) if name is None else name
        if version is not None:  # (serve's model repository: the checkpoint's step)
            self.version = str(version)
        self.lane = None  # (serve: the batcher's lane that answers this view's requests)
        self.inputs = [(i.name, "FP32", [-1, *i.shape]) for i in s.inputs]  # (cameras also take UINT8 pixels)
        self.accepts = {i.name: ("FP32", "UINT8") if i.kind == "visual" else ("FP32",) for i in s.inputs}
        self.optional = set()
        if s.discrete_branches:
            self.inputs.append(("action_masks", "FP32", [-1, sum(s.discrete_branches)]))
            self.accepts["action_masks"] = ("FP32",)
            self.optional.add("action_masks")
        if s.memory_size:
            self.inputs.append(("recurrent_in", "FP32", [-1, 1, s.memory_size]))
            self.accepts["recurrent_in"] = ("FP32",)
            self.optional.add("recurrent_in")
        self.outputs = []
        if s.continuous_size:
            self.outputs += [
                ("deterministic_continuous_actions", "FP32", [-1, s.continuous_size]),
                ("continuous_actions", "FP32", [-1, s.continuous_size]),
            ]
        if s.discrete_branches:
            self.outputs += [
                ("deterministic_discrete_actions", "INT64", [-1, len(s.discrete_branches)]),
                ("discrete_actions", "INT64", [-1, len(s.discrete_branches)]),
            ]
        if s.memory_size:
            self.outputs.append(("recurrent_out", "FP32", [-1, 1, s.memory_size]))
        self.shapes = {name: tuple(shape[1:]) for name, _, shape in self.inputs}
        self.dtypes = {name: [DTYPES[d] for d in accepted] for name, accepted in self.accepts.items()}
        self.output_names = [name for name, _, _ in self.outputs]
        self.fetch = engine_output_names(s)
        self.stats = Statistics()
        self.wire: dict = {}  # (grpc_answer: an answer's fixed wire bytes, by its outputs and their shapes)

    def check(self, name: str, version: Optional[str]) -> None:
        """NotFound unless `name` (and `version`, where given) is this model."""
        if name != self.name:
            raise NotFound(f"unknown model {_brief(name)!r}: this server serves {self.name!r}")
        if version not in (None, "", self.version):
            raise NotFound(f"unknown version {_brief(version)!r} of model {self.name!r}: it has version {self.version}")

    def server_metadata(self) -> dict:
        return {"name": SERVER_NAME, "version": __version__, "extensions": EXTENSIONS}

    def metadata(self) -> dict:
        def tensors(items):
            return [{"name": n, "datatype": d, "shape": list(shape)} for n, d, shape in items]

        return {
            "name": self.name,
            "versions": [self.version],
            "platform": "onnxruntime_onnx",
            "inputs": tensors(self.inputs),
            "outputs": tensors(self.outputs),
        }

    def config(self, max_batch: Optional[int] = None) -> dict:
        """Triton's model configuration (the fields perf_analyzer and tritonclient read), as JSON."""
        out = {
            "name": self.name,
            "platform": "onnxruntime_onnx",
            "backend": "onnxruntime",
            "max_batch_size": MAX_ROWS,
            "input": [
                {"name": n, "data_type": f"TYPE_{d}", "dims": list(shape[1:]), "optional": n in self.optional}
                for n, d, shape in self.inputs
            ],
            "output": [{"name": n, "data_type": f"TYPE_{d}", "dims": list(shape[1:])} for n, d, shape in self.outputs],
        }
        if self.settings.memory_size:  # the memory kept between a sequence's requests, as the sequence batcher does
            out["sequence_batching"] = {}
        else:  # (one or the other: Triton's scheduling choice)
            out["dynamic_batching"] = {"preferred_batch_size": [max_batch]} if max_batch else {}
        return out

    def model_stats(self) -> dict:
        """Its Triton model statistics (one entry of "model_stats")."""
        return self.stats.model_stats(self)


class Statistics:
    """Triton's model statistics, measured: per request (success, failure, queue, compute), per engine call size."""

    def __init__(self):
        self.names = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
        self.counts = dict.fromkeys(self.names, 0)
        self.ns = dict.fromkeys(self.names, 0)
        self.batches: dict = {}  # rows of an engine call -> [count, compute_infer ns]
        self.inference_count = self.execution_count = self.last_inference = 0

    def add(self, name: str, ns: int, n: int = 1) -> None:
        self.counts[name] += n
        self.ns[name] += int(ns)

    def executed(self, rows: int, ns: int) -> None:
        held = self.batches.setdefault(rows, [0, 0])
        held[0] += 1
        held[1] += int(ns)
        self.execution_count += 1

    def finished(self, job: Job, output_ns: int) -> None:
        """A request answered (its outputs encoded in `output_ns`): its times, from its arrival."""
        counts, ns = self.counts, self.ns  # (each request: the five adds written out)
        ns["success"] += time.perf_counter_ns() - job.arrived
        ns["queue"] += int(job.queue_ns)
        ns["compute_input"] += int(job.read_ns)
        ns["compute_infer"] += int(job.infer_ns)
        ns["compute_output"] += int(output_ns)
        counts["success"] += 1
        counts["queue"] += 1
        counts["compute_input"] += 1
        counts["compute_infer"] += 1
        counts["compute_output"] += 1
        self.inference_count += job.rows
        self.last_inference = int(time.time() * 1000)

    def model_stats(self, view: ModelView) -> dict:
        def duration(name):
            return {"count": self.counts[name], "ns": self.ns[name]}

        zero = {"count": 0, "ns": 0}
        return {
            "name": view.name,
            "version": view.version,
            "last_inference": self.last_inference,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {**{name: duration(name) for name in self.names}, "cache_hit": zero, "cache_miss": zero},
            "batch_stats": [
                {
                    "batch_size": rows,
                    "compute_input": {"count": count, "ns": 0},
                    "compute_infer": {"count": count, "ns": ns},
                    "compute_output": {"count": count, "ns": 0},
                }
                for rows, (count, ns) in sorted(self.batches.items())
            ],
        }


class Job:
    """One V2 request, checked: the engine's arrays (inputs, masks, memory: what prepare() makes), its rows, what it
    asks for. Serve's answering pass runs it with the JSON lines (ride: its rows' slice of the engine's outputs)."""

    def __init__(self, view: ModelView, rows: int, flat: list, wanted: list, params: dict, ident=None):
        self.view, self.rows, self.flat, self.wanted, self.ident = view, rows, flat, wanted, ident
        self.seed, self.key, self.end = params.get("seed"), params.get("key"), params.get("end", False)
        self.start, self.binary = params.get("start", False), params.get("binary", set())
        self.sequence, self.scope = params.get("sequence"), params.get("scope", V2_SCOPE)  # (as sent; its owner's)
        self.outputs: Optional[dict] = None  # name -> array, once answered
        self.error: Optional[RequestError] = None  # (typed: its status; str() its one line)
        self.memory_given = params.get("memory_given", False)
        self.arrived = time.perf_counter_ns()
        self.read_ns = self.infer_ns = self.queue_ns = (
            0  # (compute_input: reading and checking its tensors; compute_infer)
        )
        self.memories: Optional[AgentMemories] = None

    def ride_together(self, jobs: list, raw: dict, at: int, ns: int, total: int) -> None:
        """Every job of an engine call its outputs (services.protocol.ride_along calls the first job's): `raw`, the
        call's outputs (every engine output a step needs, `total` rows), the jobs' rows from `at` on, `ns` the call's
        time. The sampled outputs of the jobs without a seed are drawn in one go."""
        self.view.stats.executed(total, ns)
        starts = list(itertools.accumulate([at] + [job.rows for job in jobs[:-1]]))
        free = [(job, a) for job, a in zip(jobs, starts) if job.seed is None and job.sampled]
        drawn = {}
        if len(free) > 1:
            rows = np.concatenate([np.arange(a, a + job.rows) for job, a in free])
            part = {k: v[rows] if v.shape[:1] == (total,) else v for k, v in raw.items()}
            sampled, b = self.view.policy.decide(part, len(rows), False), 0
            for job, _ in free:
                drawn[id(job)] = {k: v[b : b + job.rows] for k, v in sampled.items()}
                b += job.rows
        for job, a in zip(jobs, starts):
            try:
                job.ride(
                    {k: v[a : a + job.rows] if v.shape[:1] == (total,) else v for k, v in raw.items()},
                    ns,
                    drawn.get(id(job)),
                )
            except UsageError as exc:
                job.fail(str(exc))

    @property
    def sampled(self) -> bool:
        return "continuous_actions" in self.wanted or "discrete_actions" in self.wanted

    def ride(self, raw: dict, ns: int = 0, sampled: Optional[dict] = None) -> None:
        """Its outputs from its rows of the engine's outputs (raw: every engine output, as engine_output_names);
        `ns`: the engine call's time; `sampled`: its sampled actions where already drawn."""
        view, rows, wanted = self.view, self.rows, self.wanted
        self.infer_ns = ns
        policy, out = view.policy, {}
        if "deterministic_continuous_actions" in wanted:
            out["deterministic_continuous_actions"] = raw["deterministic_continuous_actions"]
        if "deterministic_discrete_actions" in wanted:
            out["deterministic_discrete_actions"] = raw["deterministic_discrete_actions"].astype(np.int64, copy=False)
        if self.sampled:
            sampled = sampled if sampled is not None else policy.decide(raw, rows, False, self.seed)
            for name, key in (("continuous_actions", "continuous_actions"), ("discrete_actions", "discrete_actions")):
                if name in wanted:
                    out[name] = sampled[key] if name == "continuous_actions" else sampled[key].astype(np.int64)
        memory = raw.get("recurrent_out")
        if "recurrent_out" in wanted:
            out["recurrent_out"] = memory
        if not all(np.isfinite(v).all() for v in out.values() if v.dtype.kind == "f"):
            self.fail("the observation drives the network beyond float32 (non-finite actions)")
            return
        self.outputs = {name: np.ascontiguousarray(out[name]) for name in wanted}
        if self.key is not None:
            memories = self.memories
            if self.end:
                memories.forget(self.key)
            else:
                try:
                    memories.keep(self.key, np.array(memory.reshape(1, -1), np.float32), self.scope)
                except UsageError:  # (the whole's bound: this start is refused to the one who asked, nobody else)
                    self.fail(
                        f"sequence {shown_sequence(self.sequence)}: the server holds its most sequences "
                        f"({memories.max_ids} ids / {memories.max_bytes} bytes of memory, every client together): "
                        f"end one (sequence_end) and send sequence_start again"
                    )

    def fail(self, error) -> None:
        """Answered with `error`: a RequestError (an engine's failure: EngineFailed), or a text (a BadRequest)."""
        self.outputs, self.error = None, error if isinstance(error, RequestError) else BadRequest(error)


def tensor_array(name: str, datatype, shape, data=None, raw: Optional[bytes] = None) -> np.ndarray:
    """One request tensor as a numpy array: `data` (JSON numbers, flat or nested, row-major) or `raw` (the binary
    extension's or gRPC's raw contents, little-endian). UsageError naming the tensor for what does not fit."""
    if not isinstance(datatype, str) or datatype not in DTYPES:
        raise UsageError(f'input "{name}": datatype {_brief(datatype)!r} is not a V2 datatype this server reads')
    if (
        not isinstance(shape, (list, tuple))
        or not shape
        or not all(type(d) is int and 0 <= d < 2**31 for d in shape)
        or len(shape) > 8
    ):
        raise UsageError(f'input "{name}": shape {_brief(shape)} must be a list of whole numbers >= 0')
    dtype, count = DTYPES[datatype], math.prod(shape)
    if raw is not None:
        if len(raw) != count * dtype.itemsize:
            raise UsageError(
                f'input "{name}": {len(raw)} bytes of data, shape {list(shape)} of {datatype} takes '
                f"{count * dtype.itemsize}"
            )
        return np.frombuffer(raw, dtype).reshape(shape)
    if data is None:
        raise UsageError(f'input "{name}": no data (give "data", or binary data with "binary_data_size")')
    if not _json_values_only(data, datatype):
        what = {"BOOL": "true or false", "FP16": "numbers", "FP32": "numbers", "FP64": "numbers"}
        raise UsageError(f'input "{name}": "data" must hold {what.get(datatype, "whole numbers")} only ({datatype})')
    try:
        array = np.asarray(data, dtype=dtype)
    except (ValueError, TypeError, OverflowError):
        raise UsageError(f'input "{name}": "data" must hold {datatype} numbers (flat or nested lists)') from None
    if array.size != count:
        raise UsageError(f'input "{name}": {array.size} values, shape {list(shape)} takes {count}')
    return array.reshape(shape)


def _json_values_only(data, datatype: str) -> bool:
    """Whether `data` (a JSON value: a list, nested as deep as a shape goes) holds only the JSON values of `datatype`:
    numbers (not strings, booleans or null) for the float types, whole numbers for the integer ones, booleans for
    BOOL. Numpy would turn "0.5", "1e3" and true into numbers; the JSON lines refuse them, and so does V2. One level
    of the lists at a time (a set of the types: the check runs at C speed over a large tensor)."""
    allowed = {bool} if datatype == "BOOL" else {int, float} if datatype.startswith("FP") else {int}
    level = data if type(data) is list else [data]
    for _ in range(9):  # (a shape has at most 8 dimensions: deeper is refused by the shape check anyway)
        kinds = set(map(type, level))
        if kinds == {list}:
            level = list(itertools.chain.from_iterable(level))
            continue
        return kinds <= allowed
    return False


def _parameter(params: dict, name: str, kinds: tuple, what: str):
    value = params.get(name)
    if value is not None and (type(value) not in kinds):
        raise UsageError(f'parameter "{name}": expected {what}, got {_brief(value)}')
    return value


def read_request(
    view: ModelView, tensors: dict, outputs: Optional[list], params: dict, ident=None, owner: str = ""
) -> Job:
    """A V2 request's tensors (name -> array), the outputs asked for (None: every one) and its parameters, checked
    against the model: a Job, or a UsageError in one line. `owner`: who sent it (owner_of), whose sequences its
    sequence_id names; or a callable that says it (the fronts': asked only for a sequence's request)."""
    started = time.perf_counter_ns()
    s, policy = view.settings, view.policy
    if unknown := [n for n in tensors if n not in view.shapes]:
        raise UsageError(
            f'unknown input "{_brief(unknown[0])}": model {view.name!r} takes {", ".join(n for n, _, _ in view.inputs)}'
        )
    rows = None
    for name, array in tensors.items():
        want = view.shapes[name]
        if array.dtype not in view.dtypes[name]:
            raise UsageError(
                f'input "{name}": datatype {_datatype(array.dtype)}, this model takes {" or ".join(view.accepts[name])}'
            )
        if array.ndim != len(want) + 1 or tuple(array.shape[1:]) != want:
            raise UsageError(f'input "{name}": shape {list(array.shape)}, this model takes {[-1, *want]}')
        if rows is None:
            rows = array.shape[0]
        elif array.shape[0] != rows:
            raise UsageError(f'input "{name}": {array.shape[0]} rows, the other inputs {rows}')
    if missing := [i.name for i in s.inputs if i.name not in tensors]:
        raise UsageError(f'input "{missing[0]}" is missing')
    if not rows:
        raise UsageError("the request has no rows (a batch dimension of 0)")
    if rows > MAX_ROWS:
        raise UsageError(f"{rows} rows in one request: at most {MAX_ROWS} (the model's max_batch_size)")
    wanted = view.output_names if not outputs else outputs
    for name in wanted:
        if name not in view.output_names:
            raise UsageError(
                f'unknown output "{_brief(name)}": model {view.name!r} gives {", ".join(view.output_names)}'
            )
    if len(set(wanted)) != len(wanted):
        raise UsageError("an output is asked for twice")
    memory = tensors.get("recurrent_in")
    chosen = _chosen(params, rows, bool(s.memory_size), memory is not None, owner)
    try:
        flat, _, _ = policy.prepare(
            [tensors[i.name] for i in s.inputs],
            tensors.get("action_masks"),
            None if memory is None else memory.reshape(rows, s.memory_size),
        )
    except UsageError as exc:
        raise UsageError(str(exc).replace("\n", " ")) from None
    job = Job(view, rows, list(flat), list(wanted), chosen, ident)
    job.read_ns = time.perf_counter_ns() - started
    return job


def owner_of(peer) -> str:
    """The owner of a request's sequences, from its transport's peer: the client's host, "grpc:" or "http:" before it
    (gRPC's peer "ipv4:127.0.0.1:50412" and "ipv6:[::1]:50412" lose their port; REST's remote address is a host). A
    host, not a connection: a client may open a new channel or connection for each request (tritonclient's clients
    made per step; a channel that reconnects), and its sequences go on. One owner's sequence ids are not another's,
    and each has its own share of the memory bounds (docs/serve.md)."""
    text = str(peer or "")
    transport, _, rest = text.partition(":")
    if transport == "grpc":
        family, _, address = rest.partition(":")
        host = address.rpartition(":")[0] if family in ("ipv4", "ipv6") else family  # (unix: one host)
        text = f"grpc:{host or address}"
    return text[:300]


def shown_sequence(seq) -> str:
    """A sequence_id as the request sent it (a JSON number or string)."""
    return _brief(json.dumps(seq), 60)


def _chosen(params: dict, rows: int, memory: bool, memory_given: bool, owner: str = "") -> dict:
    """A request's parameters, checked: seed; sequence_id, sequence_start, sequence_end (a policy with memory)."""
    seed = _parameter(params, "seed", (int,), "a whole number")
    seq = _parameter(params, "sequence_id", (int, str), "a whole number or a string")
    if type(seq) is str and len(seq) > SEQUENCE_ID_CHARS:
        raise UsageError(f'parameter "sequence_id": a string longer than {SEQUENCE_ID_CHARS} characters')
    start = bool(_parameter(params, "sequence_start", (bool,), "true or false"))
    end = bool(_parameter(params, "sequence_end", (bool,), "true or false"))
    chosen = {"seed": check_seed(seed, 'parameter "seed"'), "start": start, "end": end}
    if memory and seq not in (None, 0, ""):
        if rows != 1:
            raise UsageError(f"a sequence request carries one row, not {rows} (sequence_id {_brief(seq)})")
        chosen["scope"] = scope = V2_SCOPE + (owner if type(owner) is str else owner()) + " "
        chosen["key"] = scope + (str(seq) if type(seq) is int else "s:" + seq)
        chosen["memory_given"], chosen["sequence"] = memory_given, seq
    return chosen


def _datatype(dtype) -> str:
    return next((name for name, d in DTYPES.items() if d == dtype), str(dtype))


def claim_memories(jobs: list, memories: AgentMemories) -> list:
    """The jobs of one engine call, their sequences' memories read (zeros at a sequence's start; a sequence
    unknown without its start flag, or dropped at a bound, gets its error): (these, the rest), the rest being
    a second request of a sequence already in this call (answered in the next, from this one's memory)."""
    these, rest, seen = [], [], set()
    for job in jobs:
        key = job.key
        if key is None:
            these.append(job)
            continue
        if key in seen:
            rest.append(job)
            continue
        seen.add(key)
        job.memories = memories
        if job.memory_given:
            these.append(job)
        elif job.start:
            job.flat[-1] = np.zeros_like(job.flat[-1])
            these.append(job)
        elif key in memories:
            job.flat[-1] = memories[key].reshape(1, 1, -1)
            these.append(job)
        elif key in memories.dropped.get(job.scope, ()):
            job.fail(
                f"sequence {shown_sequence(job.sequence)}: its memory was dropped at this client's bound of "
                f"{memories.scope_ids} sequences / {memories.scope_bytes} bytes (its least recently answered go "
                f"first): send sequence_start to begin it again from zeros (or its recurrent_in)"
            )
        else:
            job.fail(
                f"sequence {shown_sequence(job.sequence)} is not started: its first request must set sequence_start "
                f"(or carry recurrent_in)"
            )
    return these, rest


# -- REST: the JSON body, with Triton's binary tensor data extension
def rest_request(view: ModelView, body: bytes, header_length: Optional[str], loads, owner: str = "") -> Job:
    """POST /v2/models/{model}/infer's body: JSON, or (Inference-Header-Content-Length) JSON then the inputs'
    binary data in their order. The outputs asked for as binary (binary_data, binary_data_output) are noted."""
    started = time.perf_counter_ns()
    msg, binary = _rest_header(body, header_length, loads)
    params, inputs, outputs = msg.get("parameters") or {}, msg.get("inputs"), msg.get("outputs")
    ident = msg.get("id")
    if ident is not None and not isinstance(ident, str):
        raise UsageError('"id" must be a string')
    if type(params) is not dict:
        raise UsageError('"parameters" must be an object')
    every = params.get("binary_data_output")
    if every is not None and type(every) is not bool:
        raise UsageError(f'parameter "binary_data_output": expected true or false, got {_brief(every)}')
    wanted, binary_out = _rest_outputs(outputs, every)
    job = read_request(view, _rest_tensors(inputs, binary), wanted, params, ident, owner)
    job.binary, job.arrived = set(job.wanted) if every and outputs is None else binary_out, started
    job.read_ns = time.perf_counter_ns() - started
    return job


def _rest_header(body: bytes, header_length: Optional[str], loads) -> tuple:
    """(the JSON header as a dict, the binary data after it)."""
    if header_length is not None:
        try:
            n = int(header_length)
            if not 0 <= n <= len(body) or str(n) != header_length.strip():
                raise ValueError
        except ValueError:
            raise UsageError(
                f"Inference-Header-Content-Length {_brief(header_length)!r}: expected the JSON header's length in "
                f"bytes, at most the body's {len(body)}"
            ) from None
        header, binary = body[:n], memoryview(body)[n:]
    else:
        header, binary = body, memoryview(b"")
    try:
        msg = loads(header)
    except (ValueError, RecursionError):
        raise UsageError("the request is not JSON (or nested too deep)") from None
    if type(msg) is not dict:
        raise UsageError('the request must be a JSON object with "inputs"')
    if unknown := sorted(k for k in msg if k not in ("id", "parameters", "inputs", "outputs")):
        raise UsageError(f'unknown key "{_brief(unknown[0])}" (a V2 request has id, parameters, inputs, outputs)')
    return msg, binary


def _rest_tensors(inputs, binary: memoryview) -> dict:
    """The request's input tensors, name -> array (JSON "data", or binary_data_size bytes of the data after it)."""
    if type(inputs) is not list or not inputs:
        raise UsageError('"inputs" must be a list of tensors')
    tensors, at = {}, 0
    for tensor in inputs:
        if type(tensor) is not dict or not isinstance(tensor.get("name"), str):
            raise UsageError('each of "inputs" must be an object with a "name"')
        name, tparams = tensor["name"], tensor.get("parameters") or {}
        if name in tensors:
            raise UsageError(f'input "{_brief(name)}" is given twice')
        if type(tparams) is not dict:
            raise UsageError(f'input "{_brief(name)}": "parameters" must be an object')
        size, raw = tparams.get("binary_data_size"), None
        if size is not None and "data" in tensor:  # (Triton refuses it too: which of the two would be meant?)
            raise UsageError(f'input "{_brief(name)}": both "data" and binary_data_size given: give its values once')
        if size is not None:
            if type(size) is not int or size < 0 or at + size > len(binary):
                raise UsageError(
                    f'input "{_brief(name)}": binary_data_size {_brief(size)} does not fit the {len(binary)} bytes '
                    f"after the JSON header (Inference-Header-Content-Length)"
                )
            raw, at = bytes(binary[at : at + size]), at + size
        tensors[name] = tensor_array(_brief(name), tensor.get("datatype"), tensor.get("shape"), tensor.get("data"), raw)
    if at != len(binary):
        raise UsageError(f"{len(binary) - at} bytes after the JSON header are no input's (binary_data_size)")
    return tensors


def _rest_outputs(outputs, every) -> tuple:
    """(the outputs asked for, None for every one; those asked as binary data)."""
    if outputs is None:
        return None, set()
    if type(outputs) is not list or not all(type(o) is dict and isinstance(o.get("name"), str) for o in outputs):
        raise UsageError('"outputs" must be a list of objects with a "name"')
    binary = set()
    for o in outputs:
        oparams = o.get("parameters") or {}
        if type(oparams) is not dict:
            raise UsageError(f'output "{_brief(o["name"])}": "parameters" must be an object')
        choice = oparams.get("binary_data")
        if choice is not None and type(choice) is not bool:
            raise UsageError(
                f'output "{_brief(o["name"])}": parameter "binary_data": expected true or false, got {_brief(choice)}'
            )
        if every if choice is None else choice:
            binary.add(o["name"])
    return [o["name"] for o in outputs], binary


def rest_answer(job: Job, dumps) -> tuple:
    """(body, header length or None): the answer's JSON, the outputs asked as binary after it."""
    view, outputs, parts = job.view, [], []
    types = {n: d for n, d, _ in view.outputs}
    for name in job.wanted:
        array = job.outputs[name]
        tensor = {"name": name, "datatype": types[name], "shape": list(array.shape)}
        if name in job.binary:
            data = array.astype(DTYPES[types[name]], copy=False).tobytes()
            tensor["parameters"] = {"binary_data_size": len(data)}
            parts.append(data)
        else:
            tensor["data"] = array.reshape(-1).tolist()
        outputs.append(tensor)
    answer = {"model_name": view.name, "model_version": view.version, "outputs": outputs}
    if job.ident is not None:
        answer["id"] = job.ident
    header = dumps(answer)
    if not parts:
        return header, None
    return b"".join([header, *parts]), len(header)


# -- gRPC: ModelInferRequest and ModelInferResponse (the messages tritonclient ships, handed in)
def grpc_parameters(mapping) -> dict:
    """A request's parameters (a map of InferParameter) as plain values."""
    out = {}
    for key, value in mapping.items():
        which = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, which) if which else None
    return out


def grpc_request(view: ModelView, request, owner: str = "") -> Job:
    """A ModelInferRequest checked against the model (its name and version checked by the data plane): a Job, or a
    UsageError in one line; `owner`: its peer, whose sequences its sequence_id names."""
    started = time.perf_counter_ns()
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise UsageError(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs: one for each input")
    tensors = {}
    for n, tensor in enumerate(request.inputs):
        name = tensor.name
        if name in tensors:
            raise UsageError(f'input "{name[:40]}" is given twice')
        if raw and tensor.HasField("contents") and tensor.contents.ListFields():  # (Triton refuses it too)
            raise UsageError(
                f'input "{name[:40]}": both typed contents and raw_input_contents given: give its values once'
            )
        if raw:
            tensors[name] = tensor_array(name[:40], tensor.datatype, list(tensor.shape), raw=raw[n])
        else:
            field = CONTENTS.get(tensor.datatype)
            data = list(getattr(tensor.contents, field)) if field else None
            tensors[name] = tensor_array(name[:40], tensor.datatype, list(tensor.shape), data)
    outputs = [o.name for o in request.outputs] or None
    job = read_request(view, tensors, outputs, grpc_parameters(request.parameters), request.id or None, owner)
    job.arrived = started
    job.read_ns = time.perf_counter_ns() - started
    return job


def grpc_answer(job: Job) -> bytes:
    """The ModelInferResponse of an answered Job in its wire bytes, as protobuf writes them (fields in their numbers'
    order): model_name 1, model_version 2, id 3 (where not empty), an InferOutputTensor each (outputs 5: name 1,
    datatype 2, shape 3 packed), its tensors in raw_output_contents 6, as Triton answers. Written here rather than
    through the message classes (about as many microseconds as the rest of the answer, on every request): all but id
    and the tensors' bytes are the same for every answer of a model with the same outputs and rows, made once
    (ModelView.wire)."""
    view, wanted, outputs = job.view, job.wanted, job.outputs
    arrays = [outputs[name] for name in wanted]
    key = (tuple(wanted), *(a.shape for a in arrays))
    fixed = view.wire.get(key)
    if fixed is None:
        types = {n: d for n, d, _ in view.outputs}
        head = _field(1, view.name.encode()) + _field(2, view.version.encode())
        tensors = b"".join(
            _field(
                5,
                _field(1, name.encode())
                + _field(2, types[name].encode())
                + _field(3, b"".join(_varint(d) for d in array.shape)),
            )
            for name, array in zip(wanted, arrays)
        )
        fixed = (head, tensors, [DTYPES[types[name]] for name in wanted])
        if len(view.wire) < WIRE_KEPT:
            view.wire[key] = fixed
    head, tensors, dtypes = fixed
    parts = [head, _field(3, job.ident.encode()) if job.ident else b"", tensors]
    for array, dtype in zip(arrays, dtypes):
        data = array.astype(dtype, copy=False).tobytes()
        parts += [_RAW_TAG, _varint(len(data)), data]
    return b"".join(parts)


def grpc_stream_answer(answer: bytes) -> bytes:
    """A ModelStreamInferResponse's wire bytes around an answer's (grpc_answer): its infer_response, field 2."""
    return b"".join([_STREAM_TAG, _varint(len(answer)), answer])


WIRE_KEPT = 64  # the answers' fixed parts a model keeps (by outputs and rows): past it, made for each answer


_RAW_TAG, _STREAM_TAG = bytes([6 << 3 | 2]), bytes([2 << 3 | 2])  # (length-delimited fields 6 and 2)


def _varint(n: int) -> bytes:
    """A protobuf varint (n >= 0)."""
    if n < 0x80:
        return _BYTES[n]
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_BYTES = [bytes([n]) for n in range(0x80)]


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field (a string, bytes, a message, packed numbers)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data
