"""serve --ray: Ray Serve replicas, each loading the policy once, behind Ray Serve's HTTP ingress at POST /v1/act (one
stream line in, its answer out); @serve.batch gathers the lines a replica has waiting into one engine call. Replicas
share no memory: an LSTM line carries its "memory", the answer the next one (docs/serve.md#ray-serve)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..core.errors import UsageError
from ..core.files import handlers_kept
from ..core.observations import AgentMemories
from ..services.protocol import answer_waiting, json_codec
from ..services.ray_support import copy_package, ray_failure, ray_init, ray_model, ray_policy, ray_unreachable

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = ["APP", "ROUTE", "READY_WITHIN_S", "PolicyReplica", "serve_on_ray"]


APP, ROUTE = "mlagents-inference", "/v1/act"


READY_WITHIN_S = float(
    os.environ.get("MLAGENTS_RAY_SERVE_READY_S", 600)
)  # replicas loading, images pulled on a cluster


class PolicyReplica:
    """A Ray Serve replica: the policy loaded once; each POST /v1/act body is one stream line, answered with the
    stream's answer (its JSON text, without the newline). The lines waiting are answered together (answer_waiting),
    each in a memory scope of its own: no id keeps a memory between lines, or between two clients' lines."""

    def __init__(self, model: dict, limit: int, max_batch: int, wait_s: float):
        from ray import serve

        self.policy, self.limit = ray_policy(model), limit
        self.loads, self.dumps = json_codec()
        self.answer = serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=wait_s)(self.answer_lines)

    async def answer_lines(self, lines: list) -> list:
        with np.errstate(over="ignore"):
            answers = answer_waiting(
                self.policy, lines, AgentMemories(), self.loads, self.limit, [f"{i}:" for i in range(len(lines))]
            )
        texts = []  # (its JSON, an error answer?)
        for answer in answers:
            try:
                texts.append((self.dumps(answer), "error" in answer))
            except (TypeError, ValueError):  # (as the stream: strict JSON or nothing)
                texts.append(
                    (self.dumps({"id": answer.get("id"), "error": "the answer holds non-finite numbers"}), True)
                )
        return texts

    async def __call__(self, request):
        from starlette.responses import Response

        if request.method != "POST" or request.url.path.rstrip("/") != ROUTE:
            return Response(
                b'{"error": "POST one stream line to /v1/act"}\n',
                status_code=405 if request.url.path.rstrip("/") == ROUTE else 404,
                media_type="application/json",
            )
        body = b""
        async for part in request.stream():  # (a body past the limit is not kept)
            body += part
            if len(body) > self.limit + 2:
                break
        line = body[:-1] if body.endswith(b"\n") else body
        text, error = await self.answer(None if len(line) > self.limit else line)
        return Response(text, status_code=400 if error else 200, media_type="application/json")  # (as serve's --http)


def _one_http(args) -> Optional[str]:
    """--http's one address (Ray Serve has one HTTP ingress); --grpc refused."""
    if args.grpc:
        raise UsageError("--grpc: not with --ray (Ray Serve answers over HTTP: --http HOST:PORT)")
    if len(args.http or ()) > 1:
        raise UsageError(f"--http: given {len(args.http)} times; with --ray, Ray Serve has one HTTP ingress")
    return args.http[0] if args.http else None


def _http_address(text: str) -> tuple:
    host, _, port = (text or "").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(
            f"--http {text}: expected HOST:PORT with a port number 1-65535 (with --ray, Ray Serve's ingress)"
            if text
            else "--ray: serve through Ray Serve needs --http HOST:PORT (its HTTP ingress)"
        )
    return host.strip("[]"), int(port)


def serve_on_ray(ctx: Context) -> tuple:
    """Deploys --replicas PolicyReplicas (a GPU or an NPU each on accelerators) with Ray Serve's HTTP proxy on the head
    node at --http, tells so in one line on stderr, and serves until SIGTERM/SIGINT; then deletes what it deployed
    (Serve itself where it started it, and the local Ray instance) and main() ends 128 + N."""
    args = ctx.args
    if args.listen:
        raise UsageError("--listen: not with --ray (Ray Serve answers over HTTP: --http HOST:PORT)")
    if args.stream_stats:
        raise UsageError("--stream-stats: not with --ray (each replica answers on its own; Ray Serve's metrics tell)")
    http = _one_http(args)
    host, port = _http_address(http)
    if args.ray == "local":  # Ray's servers listen on loopback alone where it expects no cluster (as on macOS)
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import ray
        from ray import serve
    except ImportError:
        raise UsageError("--ray: serve needs Ray Serve, which is not installed: pip install -r requirements-ray.txt")
    if unreachable := ray_unreachable(args.ray):
        raise UsageError(f"--ray {args.ray}: no Ray cluster there ({unreachable})")
    if args.ray == "local":
        import socket

        try:  # (Ray Serve's proxy would fail on a taken port without saying so here)
            with socket.create_server((host, port)):
                pass
        except OSError as exc:
            raise UsageError(f"--http {http}: cannot listen there ({exc.strerror or exc})")
    model, device = ray_model(ctx), ctx.device
    resources = (
        {"num_gpus": 1}
        if device.type == "cuda"
        else {"resources": {"NPU": 1}}
        if device.type == "npu"
        else {"num_cpus": 1}
    )  # (Ray Serve's own actors reserve none; 0 here left replicas side by side)
    import logging

    with (
        tempfile.TemporaryDirectory(prefix="inference-ray-") as code,
        open(os.devnull, "w") as void,
        contextlib.redirect_stdout(void),
    ):
        copy_package(Path(code))  # (PolicyReplica is pickled by reference: the replicas import it from there)
        ray_init(ray, args.ray, code)
        started_serve = deployed = False
        try:
            logging.getLogger("ray.serve").setLevel(logging.ERROR)
            if args.ray == "local" and (where := {n["NodeManagerAddress"] for n in ray.nodes()}) != {"127.0.0.1"}:
                raise UsageError(
                    f"the local Ray instance listens on {', '.join(where)}, not on loopback alone (Ray was "
                    "imported before --ray local could keep it there); stopped"
                )
            with handlers_kept():
                started_serve = not _serve_running(serve)
                if not started_serve and APP in serve.status().applications:
                    raise UsageError(
                        f"--ray {args.ray}: this cluster already serves {APP} (another serve --ray); "
                        "stop that one first"
                    )
                serve.start(
                    proxy_location="HeadOnly",
                    http_options={"host": host, "port": port},
                    logging_config={"log_level": "WARNING", "enable_access_log": False},
                )
                max_batch = args.max_batch or 256
                deployment = serve.deployment(
                    PolicyReplica,
                    name="policy",
                    num_replicas=args.replicas,
                    ray_actor_options=resources,
                    max_ongoing_requests=2 * max_batch,
                )
                deployed = True
                serve._run(
                    deployment.bind(model, args.max_line_bytes, max_batch, args.max_wait_us / 1e6),
                    _blocking=False,
                    name=APP,
                    route_prefix=ROUTE,
                )
            _wait_until_running(serve, time.monotonic() + READY_WITHIN_S)
            print(
                f"[serve] ray serve listening on http://{f'[{host}]' if ':' in host else host}:{port}{ROUTE} "
                f"({args.replicas} "
                f"replica{'s' if args.replicas > 1 else ''})",
                file=sys.stderr,
                flush=True,
            )
            while True:  # until a signal: Interrupted (SIGTERM, SIGHUP) or KeyboardInterrupt (SIGINT) ends it
                time.sleep(3600)
        except KeyboardInterrupt as exc:
            if getattr(exc, "signum", None) != signal.SIGTERM:
                raise  # (SIGINT, SIGHUP: 128 + N, as every mode)
            # SIGTERM: a server's normal end, exit 0 once what it deployed is deleted (as serve without --ray)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"--ray: {ray_failure(exc)}") from None
        finally:
            _stop(ray, serve, args.ray == "local", started_serve, deployed)
    return None, True


def _serve_running(serve) -> bool:
    try:
        serve.context._get_global_client()
        return True
    except Exception:  # noqa: BLE001 - RayServeException: no Serve controller on this cluster
        return False


def _wait_until_running(serve, deadline: float) -> None:
    """Until the application runs and the proxy is healthy; its failure (a replica's UsageError: a checkpoint not
    readable on a node, say) in one line."""
    while True:
        status = serve.status()
        app = status.applications.get(APP)
        state = str(getattr(app, "status", "NOT_STARTED")).rsplit(".", 1)[-1]
        proxies = [str(p).rsplit(".", 1)[-1] for p in status.proxies.values()]
        if state == "RUNNING" and proxies and all(p == "HEALTHY" for p in proxies):
            return
        if state in ("DEPLOY_FAILED", "UNHEALTHY") or any(p == "UNHEALTHY" for p in proxies):
            message = "\n".join(
                [app.message, *(d.message for d in app.deployments.values())]
                if app is not None
                else ["the HTTP proxy is unhealthy"]
            )  # (a replica's traceback: its deployment's)
            found = re.search(r"UsageError: (.+)", message) or re.search(r"(\w+Error: .+)", message)
            raise UsageError(
                f"--ray: Ray Serve could not deploy the replicas: "
                f"{found.group(1).strip() if found else message.strip().splitlines()[-1][:300]}"
            )
        if time.monotonic() > deadline:
            note = (app.message.strip().splitlines() or [""])[0][:200] if app is not None else ""
            raise UsageError(
                f"--ray: the replicas did not start within {READY_WITHIN_S:.0f} s (not enough GPUs, NPUs or "
                f"CPUs free on the cluster?){': ' + note if note else ''}"
            )
        time.sleep(0.5)


def _stop(ray, serve, local: bool, started_serve: bool, deployed: bool) -> None:
    """What this command deployed is deleted: Serve with it where this command started Serve on a cluster (a local Ray
    instance ends with everything in it)."""
    with contextlib.suppress(Exception), handlers_kept():
        if ray.is_initialized() and not local and started_serve:
            serve.shutdown()
        elif ray.is_initialized() and not local and deployed:
            serve.delete(APP)
    with contextlib.suppress(Exception):
        ray.shutdown()
