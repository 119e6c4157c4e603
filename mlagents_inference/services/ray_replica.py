"""serve --ray's replica (PolicyReplica): a Ray Serve deployment's class, the policy (or a model repository's versions)
loaded once per replica, answering the ingress's (fronts.ray_serve.Ingress) POST /v1/act bodies and V2 requests
together (@serve.batch), through the stream's answering and the V2 data plane (services.dataplane), as serve's. Ray
pickles the class by reference: each replica imports it from the package copy the command ships (ray_support)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ..api.policy import Policy, load_checkpoint
from ..core.errors import UsageError
from ..core.observations import AgentMemories
from .dataplane import DataPlane, Model, RestCodec
from .errors import NotFound
from .open_inference import Job, ModelView
from .protocol import answer_texts, answer_waiting, json_codec
from .serve_common import (
    BATCH_BUCKETS,
    CONNECTION_MEMORY_BYTES,
    CONNECTION_MEMORY_IDS,
    MEMORY_BYTES,
    MEMORY_IDS,
    Histogram,
)

__all__ = ["SEQUENCE_REFUSED", "body_lines", "ray_policy", "PolicyReplica"]


SEQUENCE_REFUSED = (
    'parameter "sequence_id": not with --ray (replicas keep no memory between requests); send "recurrent_in" with '
    'each request (the last answer\'s "recurrent_out")'
)


def body_lines(body: bytes, limit: int) -> list:
    """A request body's stream lines, as a connection splits what it reads: blank lines dropped, one longer than
    `limit` None (its error answer)."""
    return [None if len(line) > limit else line for line in body.split(b"\n") if line and not line.isspace()]


def ray_policy(model: dict) -> Policy:
    """The policy a Ray worker (a Serve replica, a batch actor) loads from ray_model's or ray_version's dict."""
    checkpoint = load_checkpoint(
        Path(model["checkpoint"]),
        model["onnx"] and Path(model["onnx"]),
        model["model_dir"] and Path(model["model_dir"]),
        model["behavior"],
        model["expect_sha256"],
        model["goal_input"],
    )
    return Policy(
        checkpoint,
        model["device"],
        model["dtype"],
        model["engine"],
        model["graphs"],
        providers=model["providers"],
        spin=model["spin"],
        compile=model["compile"],
        threads=model["threads"],
    )


class PolicyReplica:
    """A Ray Serve replica: the policy loaded once. act(body) answers one POST /v1/act (its lines, in order, as one
    connection's), infer(...) one V2 request through its data plane (services.dataplane, as serve's); the requests
    waiting are answered together (@serve.batch: one answer_waiting call per version, the V2 requests riding in its
    engine call). Memories live for one call, each request in a scope of its own, within serve's bounds: no id keeps a
    memory between two requests, or across two clients'.

    A model of serve's model repository (`name`; run folders) holds the versions its deployment's user_config lists
    (reconfigure: each loaded once), and answers a request at the version it names (the ingress checked it) or at the
    one serving."""

    def __init__(
        self,
        model: Optional[dict],
        limit: int,
        max_batch: int,
        wait_s: float,
        config_batch: Optional[int] = None,
        name: Optional[str] = None,
        version: Optional[str] = None,
    ):
        from ray import serve

        self.limit, self.config_batch = limit, config_batch
        self.loads, self.dumps = json_codec()
        self.codec = RestCodec((self.loads, self.dumps), limit, _no_sequences)  # (POST .../infer's)
        # `name`: a model of serve's model repository (run folders), its versions checkpoints' steps, loaded by
        # reconfigure from the deployment's user_config (`model` None); its lines come routed by the ingress (their
        # "model" and "version" keys taken out here), its answers name both
        self.named, self.model_name = name is not None, name
        self.held: dict = {}  # version -> (policy, ModelView, DataPlane, its counts)
        if model is not None:
            self.install({str(version or ModelView.version): self.loaded(ray_policy(model), name, version)}, version)
        self.answer = serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=wait_s)(self.answer_requests)
        try:
            context = serve.get_replica_context()
            self.name = str(getattr(context, "replica_id", None) or context.replica_tag)
        except Exception:  # noqa: BLE001 - outside a replica (a test): the process
            self.name = f"pid{os.getpid()}"
        self.lines = self.errors = self.seq = 0
        self.batches = Histogram(BATCH_BUCKETS)

    def loaded(self, policy, name: Optional[str], version: Optional[str]) -> tuple:
        """One version as this replica answers with it: (policy, its V2 view, its data plane, its counts)."""
        view = ModelView(policy, name, version)
        model = Model(view, view.metadata, lambda: self.config(view), view.model_stats, None)
        model.submit = lambda job, v=view.version: self.answer((v, job))
        plane = DataPlane({view.name: model}, lambda: False, view.server_metadata())  # (the ingress stops)
        return policy, view, plane, [0, 0, Histogram(BATCH_BUCKETS)]

    def install(self, held: dict, serving: Optional[str]) -> None:
        """The versions this replica answers with, and the one serving, swapped in whole: a batch already in
        answer_now keeps what it started with."""
        self.state = (held, held[str(serving or ModelView.version)])  # (one object: read once by a request)
        self.held, self.serving = self.state
        self.policy, self.view, self.plane = self.serving[:3]

    def reconfigure(self, config: dict) -> None:
        """Ray Serve's user_config ({"versions": {step: ray_version's dict}, "serving": a step}): the versions a
        model's deployment keeps and the one serving, rolled out by `serve.run` of the deployment with a new user_config
        (a lightweight update: Ray Serve calls this on each replica in turn, none restarted); a version held already is
        not loaded again, one no longer listed is let go (a batch holding it finishes on it)."""
        if not self.named:
            return
        held = {
            version: self.held.get(version) or self.loaded(ray_policy(model), self.model_name, version)
            for version, model in config["versions"].items()
        }
        self.install(held, str(config["serving"]))

    def config(self, view: Optional[ModelView] = None) -> dict:
        """Triton's model configuration, as a replica serves the model: no sequence batching (SEQUENCE_REFUSED)."""
        config = (view or self.view).config(self.config_batch)
        if config.pop("sequence_batching", None) is not None:  # (no sequence keeps a memory on Ray: SEQUENCE_REFUSED)
            config["dynamic_batching"] = {"preferred_batch_size": [self.config_batch]} if self.config_batch else {}
        return config

    def describe(self) -> dict:
        """The model as V2 tells it (metadata, configuration, server metadata), for the ingress's GETs: the version
        serving, and each version held ("versions")."""
        view, held = self.view, self.held
        loaded = sorted(held, key=lambda v: (len(v), v))
        each = {
            v: {"metadata": {**h[1].metadata(), "versions": loaded}, "config": self.config(h[1])}
            for v, h in held.items()
        }
        return {
            "name": view.name,
            "version": view.version,
            "versions": each,
            "metadata": each[view.version]["metadata"],
            "config": each[view.version]["config"],
            "server": view.server_metadata(),
            "tally": self.tally(),
        }

    def tally(self) -> dict:
        """This replica's counts so far (the ingress keeps each replica's latest and sums them): its own, and each
        version's it holds."""

        def counts(h) -> dict:
            s, (lines, errors, batches) = h[1].stats, h[3]
            return {
                "lines": lines,
                "errors": errors,
                "batch": [batches.counts[:], batches.sum, batches.n],
                "v2": [dict(s.counts), dict(s.ns), {k: v[:] for k, v in s.batches.items()}]
                + [s.inference_count, s.execution_count, s.last_inference],
            }

        return {
            "replica": self.name,
            "model": self.view.name,
            "version": self.view.version,
            "seq": self.seq,
            "lines": self.lines,
            "errors": self.errors,
            "batch": [self.batches.counts[:], self.batches.sum, self.batches.n],
            "versions": {v: counts(h) for v, h in self.held.items()},
        }

    async def act(self, body: bytes, version: Optional[str] = None) -> tuple:
        """POST /v1/act (its lines at `version`, the ingress's choice; None: the one serving): (status, body, content
        type, None, tally)."""
        return await self.answer((version, body))

    async def infer(self, name: str, version: Optional[str], body: bytes, header_length: Optional[str]) -> tuple:
        """POST .../infer (the model checked by the ingress too): (status, body, content type, header length, tally)."""
        every, serving = self.state
        held = every.get(version) if version not in (None, "") else serving
        if held is None:
            answer = self.codec.refusal(NotFound(_not_held(name, version, every)))
        else:
            answer = await held[2].infer(name, version, self.codec, (body, header_length, ""))
        self.seq += 1
        return (*answer, self.tally())

    async def answer_requests(self, requests: list) -> list:
        return self.answer_now(requests)

    def answer_now(self, requests: list) -> list:
        """The answers of requests waiting together ((version, body of /v1/act or V2 Job)), in order: one engine call
        per version."""
        held, serving = self.state  # (one read: whatever a rollout does meanwhile)
        groups: dict = {}
        for k, (version, _) in enumerate(requests):
            groups.setdefault(version or serving[1].version, []).append(k)
        answers: list = [None] * len(requests)
        for version, ks in groups.items():
            one = held.get(version)
            if one is None:  # (let go by a rollout since the ingress chose it)
                for k in ks:
                    answers[k] = self.not_held(requests[k][1], version, held)
                continue
            for k, answer in zip(ks, self.answer_version(one, [requests[k][1] for k in ks])):
                answers[k] = answer
        self.seq += 1
        tally = self.tally()
        return [answer if type(answer) is Job else (*answer, tally) for answer in answers]

    def not_held(self, request, version: str, held: dict):
        why = _not_held(self.view.name, version, held)
        if type(request) is Job:
            request.error = NotFound(why)
            return request
        return 400, self.dumps({"id": None, "error": why}), "application/json", None

    def answer_version(self, held: tuple, requests: list) -> list:
        """The answers of one version's requests (bodies of /v1/act, V2 Jobs), in order: one answer_waiting call."""
        policy, view, _, counts = held
        lines, scopes, spans, jobs = [], [], [], []
        for k, request in enumerate(requests):
            if type(request) is Job:
                jobs.append(request)
                spans.append(None)
                continue
            got = body_lines(request, self.limit)
            spans.append((len(lines), len(got)))
            lines += got
            scopes += [f"{k}:"] * len(got)
        memories = AgentMemories(MEMORY_IDS, MEMORY_BYTES, CONNECTION_MEMORY_IDS, CONNECTION_MEMORY_BYTES)
        started = time.perf_counter_ns()
        for job in jobs:
            job.queue_ns = max(0, started - job.arrived - job.read_ns)
        with np.errstate(over="ignore"):
            loads = _routed(self.loads) if self.named else self.loads
            answers = answer_waiting(policy, lines, memories, loads, self.limit, scopes, jobs[:])
        if self.named:  # (every answer names the model and version that gave it, as serve's)
            for answer in answers:
                answer["model"], answer["version"] = view.name, view.version
        texts = answer_texts(self.dumps, answers)
        errors = sum("error" in a for a in answers) + sum(job.error is not None for job in jobs)
        n = len(lines) + len(jobs)
        self.lines, self.errors = self.lines + n, self.errors + errors
        self.batches.add(n)
        counts[0], counts[1] = counts[0] + n, counts[1] + errors
        counts[2].add(n)
        return [
            request if span is None else self.lines_answer(texts, answers, *span)  # (a Job: answered)
            for request, span in zip(requests, spans)
        ]

    def lines_answer(self, texts: list, answers: list, at: int, n: int) -> tuple:
        if n == 0:
            return 400, self.dumps({"id": None, "error": "empty body: expected stream lines"}), "application/json", None
        if n == 1:  # (as serve --http: the answer, 400 for an error answer)
            return 400 if "error" in answers[at] else 200, texts[at], "application/json", None
        return 200, b"\n".join(texts[at : at + n]) + b"\n", "application/x-ndjson", None


def _not_held(name: str, version: str, held: dict) -> str:
    """A version this replica does not hold (a rollout let it go since the ingress checked it): serve's text."""
    loaded = ", ".join(sorted(held, key=lambda v: (len(v), v)))[:200]
    return f"model {name}: version {str(version)[:40]} is not loaded (loaded: {loaded})"


def _routed(loads):
    """A replica's line reader where the ingress routed the lines (it checked their model and version): their "model"
    and "version" keys taken out, as serve's batcher does."""

    def read(raw):
        obj = loads(raw)
        if isinstance(obj, dict):
            obj.pop("model", None)
            obj.pop("version", None)
        return obj

    return read


def _no_sequences(job: Job) -> None:
    if job.key is not None:
        raise UsageError(SEQUENCE_REFUSED)
