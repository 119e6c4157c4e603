"""Ray support for batch --ray (Ray Data) and serve --ray (Ray Serve): Ray started or joined, the package
shipped to its workers, what a Ray worker loads its policy from (services.ray_replica.ray_policy loads it), Ray's
failures in one line."""

from __future__ import annotations

import re
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..core.errors import UsageError
from ..core.files import handlers_kept

if TYPE_CHECKING:  # (annotations only)
    from .context import Context

__all__ = [
    "ray_model",
    "ray_version",
    "ray_options",
    "ray_init",
    "copy_package",
    "ray_unreachable",
    "ray_failure",
    "serve_running",
    "wait_until_running",
]


def ray_model(ctx: Context) -> dict:
    """What a Ray worker loads its policy from (ray_policy): the source as this command resolved it, at absolute paths
    (read at the same paths on every node); the checkpoint is checked here before any worker starts."""
    args, src = ctx.args, ctx.source
    ctx.settings
    return {
        "checkpoint": str(Path(src.checkpoint).resolve()),
        "onnx": args.onnx and str(Path(args.onnx).resolve()),
        "model_dir": src.model_dir and str(Path(src.model_dir).resolve()),
        "behavior": src.behavior,
        "expect_sha256": args.expect_sha256,
        **ray_options(ctx),
    }


def ray_version(ctx: Context, behavior: str, run, checkpoint) -> dict:
    """ray_model for one version of a model repository's model (serve --ray of run folders): its checkpoint, the
    ML-Agents ONNX written with it where there is one, its run folder; verified by the repository in this command."""
    path = Path(checkpoint).resolve()
    onnx = path.with_suffix(".onnx")
    return {
        "checkpoint": str(path),
        "onnx": str(onnx) if onnx.is_file() else None,
        "model_dir": str(Path(run).resolve()),
        "behavior": behavior,
        "expect_sha256": None,
        **ray_options(ctx),
    }


def ray_options(ctx: Context) -> dict:
    """How a Ray worker builds its policy (engine, device, precision...), as this command's options say."""
    args = ctx.args
    return {
        "goal_input": args.goal_input,
        "device": ctx.device.type,
        "dtype": args.dtype,
        "engine": ctx.engine_name,
        "graphs": args.graphs == "on",
        "providers": args.providers,
        "spin": args.spin == "on",
        "compile": args.compile == "on",
        "threads": args.threads,
    }


def ray_init(ray, where: str, code: str) -> None:
    """ray.init for --ray local|ADDRESS, the package's copy `code` as the workers' working_dir; no cluster there is
    one line. Batch's Ray Data and serve's Ray Serve both start this way."""
    import logging

    try:
        with handlers_kept():  # (ray.init installs SIGTERM handlers of its own)
            ray.init(
                address="local" if where == "local" else where,
                runtime_env={"working_dir": code},
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(f"--ray {where}: no Ray cluster there ({str(exc).splitlines()[0][:160]})")
    except KeyboardInterrupt:  # (a signal while Ray starts: what it started ends)
        ray.shutdown()
        raise


def copy_package(folder: Path) -> None:
    """This package's source into folder/mlagents_inference: from its folder, or from the .pyz it runs from."""
    import shutil

    package = Path(__file__).resolve().parents[1]
    if package.is_dir():
        shutil.copytree(package, folder / package.name, ignore=shutil.ignore_patterns("__pycache__"))
        return
    with zipfile.ZipFile(package.parent) as pyz:
        pyz.extractall(folder, [m for m in pyz.namelist() if m.startswith(package.name + "/")])


def ray_unreachable(address: str) -> Optional[str]:
    """Why nothing answers at a HOST:PORT --ray address (ray.init would wait for minutes), else None."""
    import socket

    host, _, port = address.rpartition(":")
    if address == "local" or "://" in address or not port.isdigit():
        return None
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def ray_failure(exc: BaseException) -> str:
    """The one line a failure inside Ray comes down to: a worker's UsageError as it was raised
    (Ray wraps it, with the worker's traceback in the text), a worker process that died, else the
    failure's last line."""
    seen, texts, died = exc, [], False
    while seen is not None and len(texts) < 20:
        names = [c.__name__ for c in type(seen).__mro__]
        if "UsageError" in names and not hasattr(seen, "cause"):
            return str(seen).splitlines()[0]
        died = died or bool({"RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError"} & set(names))
        texts.append(str(seen))
        seen = getattr(seen, "cause", None) or seen.__cause__ or seen.__context__
    if found := re.search(r"UsageError: (.+)", "\n".join(texts)):
        return found.group(1).strip()
    if died:  # (Ray's own text ends in guesses, such as "never ran - it was cancelled")
        return "a Ray worker process died (killed, out of memory or crashed; Ray's logs on its node tell which)"
    lines = [l for l in texts[0].splitlines() if l.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def serve_running(serve) -> bool:
    try:
        serve.context._get_global_client()
        return True
    except Exception:  # noqa: BLE001 - RayServeException: no Serve controller on this cluster
        return False


def wait_until_running(serve, deadline: float, name: str, within: float, stopped=None) -> None:
    """Until the application runs; its failure (a replica's UsageError: a checkpoint not readable on a node, say) in
    one line; `stopped()` true (the command stopping): UsageError at once."""
    while True:
        if stopped is not None and stopped():
            raise UsageError(f"--ray: stopped before {name} ran")
        status = serve.status()
        app = status.applications.get(name)
        state = str(getattr(app, "status", "NOT_STARTED")).rsplit(".", 1)[-1]
        if state == "RUNNING":
            return
        if state in ("DEPLOY_FAILED", "UNHEALTHY"):
            message = "\n".join(
                [app.message, *(d.message for d in app.deployments.values())]
            )  # (a replica's traceback: its deployment's)
            found = re.search(r"UsageError: (.+)", message) or re.search(r"(\w+Error: .+)", message)
            raise UsageError(
                f"--ray: Ray Serve could not deploy the replicas: "
                f"{found.group(1).strip() if found else message.strip().splitlines()[-1][:300]}"
            )
        if time.monotonic() > deadline:
            note = (app.message.strip().splitlines() or [""])[0][:200] if app is not None else ""
            raise UsageError(
                f"--ray: the replicas did not start within {within:.0f} s (not enough GPUs, NPUs or "
                f"CPUs free on the cluster?){': ' + note if note else ''}"
            )
        time.sleep(0.1)
