"""The command line: every option declared once, with its help, default and the modes it applies
to; main() and its exit codes."""

import argparse
import contextlib
import importlib
import json
import math
import os
import sys
import warnings
from typing import Callable, Optional

from .. import __doc__ as PACKAGE_DOC
from .. import __version__
from ..core.errors import CheckFailed, NotThisPolicy, UsageError
from ..core.extras import missing_package
from ..core.files import describe_os_error, install_signal_handlers, restore_signal_handlers
from ..core.sources import DEFAULT_REPO, SHA256_HEX
from ..core.spec import DTYPES, ENGINES
from ..services.context import Context

__all__ = [
    "MODES",
    "TORCH_MODES",
    "mode_functions",
    "OneLineParser",
    "positive_int",
    "seed_int",
    "column_names",
    "OPTION_MODES",
    "OPTION_DEFAULTS",
    "OPTION_WITH",
    "option",
    "build_parser",
    "parse_args",
    "main",
    "interrupt_in_chain",
]

# mode -> (its module, the function that computes the result, the one that renders its human lines).
# A mode's module is imported when that mode runs: torch comes with the modes that need it.
MODES: dict = {
    "info": ("show", "mode_info", "show_info"),
    "checkpoints": ("show", "mode_checkpoints", "show_checkpoints"),
    "action": ("show", "mode_action", "show_action"),
    "sample": ("show", "mode_sample", "show_sample"),
    "batch": ("batch", "mode_batch", "show_batch"),
    "precision": ("verify", "mode_precision", "show_precision"),
    "onnx-compare": ("verify", "mode_onnx_compare", "show_onnx_compare"),
    "export-onnx": ("export_onnx", "mode_export_onnx", "show_export_onnx"),
    "fingerprint": ("show", "mode_fingerprint", "show_fingerprint"),
    "stats": ("show", "mode_stats", "show_stats"),
    "benchmark": ("benchmark", "mode_benchmark", "show_benchmark"),
    "stream": ("stream", "mode_stream", None),  # (answers line by line)
    "serve": ("serve", "mode_serve", None),  # (answers connections until stopped; docs/serve.md)
}


TORCH_MODES = ("precision", "onnx-compare", "export-onnx")  # (the others run on the ML-Agents ONNX alone without torch)


def mode_functions(mode: str, ray: bool = False) -> tuple:
    """(compute, show) of a mode, its module imported now (serve --ray: Ray Serve's front)."""
    module, compute, show = ("ray_serve", "serve_on_ray", None) if mode == "serve" and ray else MODES[mode]
    module = importlib.import_module(f"{__package__}.{module}")
    return getattr(module, compute), show and getattr(module, show)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")


def _whole_number(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        if value < low or (high is not None and value >= high):
            raise argparse.ArgumentTypeError(
                f"{value} must be at least {low}" if high is None else f"{value} must be between {low} and {high - 1}"
            )
        return value

    return parse


positive_int = _whole_number(1)


seed_int = _whole_number(0, 2**32)  # what np.random.RandomState accepts


def _input_indices(text: str) -> tuple:
    """An argparse type: 'N' or 'N,M,...', input indices."""
    return tuple(_whole_number(0)(part.strip()) for part in text.split(","))


def column_names(text: str) -> list:
    names = [n.strip() for n in text.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected distinct comma-separated column names, got {text!r}")
    return names


def _providers(text: str) -> list:
    from ..engines.devices import parse_providers  # (onnxruntime's names; whether this build has them is told at load)

    try:
        return parse_providers(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--providers: "))


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


OPTION_MODES: dict = {}  # dest -> the modes an option applies to (absent: every mode)


OPTION_DEFAULTS: dict = {}  # dest -> {mode: default} where the default depends on the mode


OPTION_WITH: dict = {}  # dest -> (another option's dest, True: applies only with it | False: only without it)


def option(
    group,
    *flags,
    modes: Optional[tuple] = None,
    per_mode: Optional[dict] = None,
    needs: Optional[str] = None,
    not_with: Optional[str] = None,
    **kwargs,
) -> None:
    """Declare an option once: argparse's help and default, the modes it applies to, defaults that
    differ by mode (per_mode, with "*" for the others), and the option it needs or must not meet."""
    action = group.add_argument(*flags, **kwargs)
    if modes:
        OPTION_MODES[action.dest] = modes
    if per_mode:
        OPTION_DEFAULTS[action.dest] = per_mode
    if needs or not_with:
        OPTION_WITH[action.dest] = (needs, True) if needs else (not_with, False)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        description=PACKAGE_DOC.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Modes: " + ", ".join(MODES) + ". docs/modes.md shows an example of each.",
    )
    p.add_argument("--mode", choices=list(MODES), default="info", help="what to do (default: info)")
    p.add_argument("--version", action="version", version=f"mlagents-inference {__version__}")
    src = p.add_argument_group(
        "model (first that applies: --checkpoint, --model-dir, $HUGGY_MODEL_DIR, --model on the Hub, bundled sample)"
    )
    option(src, "--checkpoint", help="an ML-Agents checkpoint file, e.g. Huggy/Huggy-2000049.pt")
    option(
        src,
        "--model-dir",
        action="append",
        help="a Hugging Face ML-Agents folder (<Behavior>.onnx, <Behavior>/*.pt, run_logs/); serve: also a run folder "
        "of several behaviours or a folder of run folders, and given several times, serves each (docs/serve.md)",
    )
    option(
        src,
        "--model",
        metavar="REPO_ID",
        default=None,
        help=f"Hub repo id (default {DEFAULT_REPO}; offline or unreachable -> bundled sample)",
    )
    option(src, "--expect-sha256", metavar="HEX", help="refuse a checkpoint whose sha256 differs (pin a file)")
    option(
        src,
        "--onnx",
        help="the policy's ML-Agents ONNX: the reference of onnx-compare/export-onnx/benchmark and "
        "the source of input shapes the checkpoint does not hold (default: the checkpoint's own); "
        "with no --checkpoint/--model-dir/--model, the policy itself (ONNX alone)",
    )
    option(
        src,
        "--goal-input",
        type=_input_indices,
        default=None,
        metavar="N[,N...]",
        help="goal-conditioned policies: which inputs (obs_N) are the goal signal, when the shapes do not tell",
    )
    run = p.add_argument_group("device and precision")
    option(run, "--device", default="auto", help="auto (npu, else cuda, else cpu) | cpu | cuda[:N] | npu[:N]")
    option(
        run,
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="the network's precision; normalizers stay float32 (default float32, recommended)",
    )
    option(
        run,
        "--engine",
        choices=ENGINES,
        default="auto",
        help="auto: onnxruntime on CPU float32, torch elsewhere; "
        "without torch: onnxruntime on the policy's ML-Agents ONNX",
    )
    option(
        run,
        "--providers",
        type=_providers,
        default=None,
        metavar="NAME[,NAME...]",
        help="onnxruntime's execution providers in priority order (cuda, tensorrt, cann, openvino, coreml, directml, "
        "rocm, ...; the CPU is the fallback): the onnxruntime engine on them (docs/accelerators.md)",
    )
    option(
        run,
        "--graphs",
        choices=("on", "off"),
        default="on",
        help="torch engine on CUDA/NPU: capture each batch size as a device graph; onnxruntime's CUDA provider: "
        "enable_cuda_graph over bound device buffers (default on)",
    )
    option(
        run,
        "--compile",
        choices=("on", "off"),
        default="off",
        help="torch engine: run the network through torch.compile (CPU, CUDA; torchair on an NPU), checked against "
        "eager first; a failure runs eager, in one line (default off; docs/accelerators.md)",
    )
    option(
        run,
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help="CPU engines: torch's threads during the torch engine's calls, onnxruntime's intra-op threads (default: "
        "each library's own, the cores; 1 can be faster on a loaded machine: docs/performance.md)",
    )
    option(
        run,
        "--spin",
        choices=("on", "off"),
        default=None,
        per_mode={"serve": "off", "*": "on"},
        help="onnxruntime engine: its threads spin-wait for the next call (default on, onnxruntime's own; serve: off, "
        "leaving the CPU to its clients; docs/serve.md#measured)",
    )
    obs = p.add_argument_group("inputs")
    option(
        obs,
        "--obs",
        default="random",
        modes=("action", "sample"),
        help="random | zeros | ones | ones_neg | boundary | <number> | <comma-separated numbers>, for every input; "
        "per input: 'obs_0=VALUE;obs_1=VALUE' (VALUE may be a .npy, or a .png/.jpg for an image)",
    )
    option(
        obs,
        "--mask",
        metavar="0,1,...",
        modes=("action", "sample", "batch"),
        help="action mask, 1 = allowed, branches side by side (default: all allowed; batch: random masks)",
    )
    option(
        obs,
        "--memory",
        metavar="NUMBERS",
        modes=("action", "sample"),
        help="LSTM policies: the memory [h, c] to start from (comma-separated, or zeros; default zeros)",
    )
    option(
        obs,
        "--seed",
        type=seed_int,
        default=0,
        help="RandomState(seed) for observations, torch.Generator(seed) for sampling noise (default 0)",
    )
    option(
        obs,
        "--batch",
        type=positive_int,
        default=None,
        modes=("batch", "onnx-compare", "benchmark"),
        not_with="obs_file",
        per_mode={"onnx-compare": 64, "benchmark": 1, "*": 32},
        help="rows per call (batch: 32, onnx-compare: 64, benchmark: 1)",
    )
    option(
        obs,
        "--obs-file",
        modes=("batch",),
        help="batch: .npy (memory-mapped) or .csv of [rows, obs_dim], or .npz with obs_0 ... obs_k "
        "(+ action_masks, memory), or a .parquet file or folder of them with those columns (needs pyarrow)",
    )
    option(
        obs,
        "--keep-columns",
        type=column_names,
        default=None,
        metavar="A,B",
        modes=("batch",),
        needs="obs_file",
        help="batch, Parquet in and out: columns copied through to --output (ids, timestamps)",
    )
    option(
        obs,
        "--chunk",
        type=_whole_number(1, 1 << 24),
        default=16384,
        modes=("batch",),
        needs="obs_file",
        help="rows per call with --obs-file (default 16384)",
    )
    option(
        obs,
        "--output",
        modes=("batch", "export-onnx"),
        help="batch: .npy (continuous actions), .npz or .parquet (continuous_actions, discrete_actions, memory), "
        "or with --ray a folder (no suffix: Ray Data's write_parquet); "
        "export-onnx: .onnx (default huggy_rebuilt.onnx: in assets/ in a clone, else the current folder)",
    )
    option(
        obs,
        "--ray",
        metavar="local|ADDRESS",
        modes=("batch", "serve"),
        help="batch over Parquet through Ray Data (with --obs-file), or serve through Ray Serve: on a local Ray "
        "instance, or on the cluster at ADDRESS (ray start --head ...); needs pip install -r requirements-ray.txt",
    )
    option(
        obs,
        "--ray-actors",
        type=_whole_number(1, 4096),
        default=2,
        modes=("batch",),
        needs="ray",
        help="--ray: policy actors, each loading the policy once (one GPU or NPU each on accelerators; default 2)",
    )
    option(
        obs,
        "--progress",
        action="store_true",
        modes=("batch",),
        needs="obs_file",
        help="show the --obs-file progress bar even when stderr is not a terminal",
    )
    chk = p.add_argument_group("checks and measurements")
    option(
        chk,
        "--samples",
        type=positive_int,
        default=100,
        modes=("precision",),
        help="precision: observations compared (default 100)",
    )
    option(
        chk,
        "--tol",
        type=_positive_float,
        default=None,
        modes=("precision", "onnx-compare"),
        per_mode={"precision": 0.01, "*": 1e-4},
        help="precision: max abs error allowed (default 0.01); onnx-compare: max abs error of the continuous "
        "actions and max relative error of the memory allowed (default 1e-4)",
    )
    option(
        chk,
        "--steps",
        type=positive_int,
        default=None,
        modes=("fingerprint", "stats", "onnx-compare"),
        per_mode={"stats": 50, "*": 64},
        help="fingerprint (64) / stats (50) / onnx-compare memory rollout (64): steps",
    )
    option(
        chk,
        "--rollouts",
        type=positive_int,
        default=5,
        modes=("stats",),
        help="stats: closed-loop rollouts (default 5)",
    )
    option(
        chk,
        "--deterministic",
        action="store_true",
        modes=("fingerprint", "stats"),
        help="fingerprint/stats: deterministic actions, no noise",
    )
    option(
        chk, "--runs", type=positive_int, default=200, modes=("benchmark",), help="benchmark: timed calls (default 200)"
    )
    option(
        chk,
        "--plot",
        metavar="FILE.png",
        modes=("benchmark",),
        help="benchmark: draw the latency distribution (needs matplotlib)",
    )
    option(
        chk,
        "--stream-stats",
        "--stats",
        action="store_true",
        modes=("stream", "serve"),
        help="stream/serve: print line count, errors and latency to stderr at the end (--stats: its former name)",
    )
    option(
        chk,
        "--max-line-bytes",
        type=_whole_number(64, 1 << 31),
        default=16 << 20,
        modes=("stream", "serve"),
        help="stream/serve: a longer line is answered with an error and skipped (default 16 MiB)",
    )
    net = p.add_argument_group("serve (docs/serve.md)")
    option(
        net,
        "--listen",
        metavar="HOST:PORT|unix:PATH",
        action="append",
        modes=("serve",),
        help="serve: the stream's JSON lines over TCP (port 0: any free port) or a Unix socket; "
        "given several times, listens on each",
    )
    option(
        net,
        "--http",
        metavar="HOST:PORT",
        action="append",
        modes=("serve",),
        help="serve: GET /healthz, GET /metrics (Prometheus), POST /v1/act (one stream line) and the Open "
        "Inference Protocol's REST routes (/v2/...); with --ray, Ray Serve's ingress",
    )
    option(
        net,
        "--grpc",
        metavar="HOST:PORT",
        action="append",
        modes=("serve",),
        help="serve: the Open Inference Protocol's gRPC service (KServe V2, inference.GRPCInferenceService)",
    )
    option(
        net,
        "--grpc-process",
        choices=("on", "off"),
        default="on",
        modes=("serve",),
        needs="grpc",
        help="serve --grpc: grpcio's server in a process of its own, its calls handed to serve over a socket pair "
        "(each call's work off serve's event loop: more requests a second from many clients, a lone call's round "
        "trip a little longer; default on; off: in serve's own event loop; docs/performance.md)",
    )
    option(
        net,
        "--allow-remote",
        action="store_true",
        modes=("serve",),
        help="serve: listen on an address other than loopback (0:PORT and 0.0.0.0 bind every interface); "
        "there is no authentication, so this must be meant",
    )
    option(
        net,
        "--max-batch",
        type=_whole_number(1, 1 << 20),
        default=None,
        modes=("serve",),
        help="serve: at most this many lines in one engine call (default: every line waiting)",
    )
    option(
        net,
        "--max-wait-us",
        type=_whole_number(0, 10_000_000),
        default=0,
        modes=("serve",),
        help="serve: wait up to this long for more lines before an engine call "
        "(default 0: a lone line is answered at once)",
    )
    option(
        net,
        "--body-timeout-s",
        type=_positive_float,
        default=30.0,
        modes=("serve",),
        needs="http",
        help="serve --http: a POST's body must arrive within this many seconds, else 408 and the connection closed "
        "(default 30)",
    )
    option(
        net,
        "--http-in-flight-bytes",
        type=_whole_number(1 << 16, 1 << 40),
        default=64 << 20,
        modes=("serve",),
        needs="http",
        help="serve --http: the bodies of the POSTs being read and answered, all together (one without "
        "Content-Length counts as --max-line-bytes): past it, 503 at once, the body unread (default 64 MiB)",
    )
    option(
        net,
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        modes=("serve",),
        not_with="ray",
        help="serve: the event loop, as uvicorn's --loop (default auto: uvloop where it is installed, else asyncio; "
        "uvloop: less CPU a request, docs/performance.md)",
    )
    option(
        net,
        "--replicas",
        type=_whole_number(1, 4096),
        default=1,
        modes=("serve",),
        needs="ray",
        help="serve --ray: Ray Serve replicas, each loading the policy once (one GPU or NPU each on accelerators)",
    )
    option(
        net,
        "--follow",
        action="store_true",
        modes=("serve",),
        help="serve: follow the run folders: a checkpoint mlagents-learn finishes is verified, then swapped in",
    )
    option(
        net,
        "--versions",
        type=_whole_number(1, 1024),
        default=None,
        modes=("serve",),
        help="serve: keep the newest N verified versions of each model loaded (default 1; --ray: by its replicas)",
    )
    option(
        net,
        "--pin",
        metavar="MODEL:VERSION",
        action="append",
        modes=("serve",),
        help="serve: hold that version (a checkpoint's step) while newer ones arrive; given several times, each",
    )
    option(
        net,
        "--allow-model-control",
        action="store_true",
        modes=("serve",),
        help="serve: answer the V2 repository API (index, load, unload: rollbacks) instead of refusing it (--ray too)",
    )
    option(
        net,
        "--follow-poll-s",
        type=_positive_float,
        default=2.0,
        modes=("serve",),
        needs="follow",
        help="serve --follow: how often the run folders are scanned (default 2 s; between scans, a new listing in "
        "training_status.json is looked for every 0.2 s)",
    )
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout instead of text")
    return p


def _glue_option_values(argv: list, options=("--obs", "--memory")) -> list:
    """Let `--obs -0.5` and `--obs -2.0,-1.93,...` work without '=' (argparse takes a leading minus for an option)."""
    out, words = [], iter(argv)
    for word in words:
        value = next(words, None) if word in options else None
        out.append(word if value is None else f"{word}={value}")
    return out


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _model_dirs(args: argparse.Namespace) -> None:
    """--model-dir given several times: serve alone takes each (args.model_dirs); args.model_dir is the first."""
    dirs = args.model_dir or []
    if len(dirs) > 1 and args.mode != "serve":
        raise UsageError(f"--model-dir is given {len(dirs)} times: only --mode serve serves several folders")
    args.model_dirs, args.model_dir = list(dirs), dirs[0] if dirs else None
    if any(not str(d).strip() for d in dirs):
        raise UsageError("--model-dir: empty value")


def parse_args(argv: list) -> argparse.Namespace:
    parser, glued = build_parser(), _glue_option_values(argv)
    args = parser.parse_args(glued)
    # The one place where options that do not fit are refused, not ignored: given (on the command line, whatever its
    # value) with another mode, or without the option it needs, or with one it must not meet
    for action in parser._actions:
        action.default = argparse.SUPPRESS  # parsed again: the namespace holds the options given, and those alone
    given = list(vars(parser.parse_args(glued)))
    for dest in given:
        if dest in OPTION_MODES and args.mode not in OPTION_MODES[dest]:
            raise UsageError(f"{_flag(dest)} applies to --mode {' / '.join(OPTION_MODES[dest])}, not {args.mode}")
    for dest in given:
        other, needed = OPTION_WITH.get(dest, (None, None))
        if other and (other in given) != needed:
            raise UsageError(
                f"{_flag(dest)} {'applies only with' if needed else 'does not apply with'} {_flag(other)}; "
                "it would be ignored"
            )
    for dest, defaults in OPTION_DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, defaults.get(args.mode, defaults["*"]))
    _model_dirs(args)
    if args.expect_sha256 is not None and not SHA256_HEX.fullmatch(args.expect_sha256.strip()):
        raise UsageError("--expect-sha256: expected 64 hexadecimal digits")
    if args.mode in ("stream", "serve") and args.json:
        raise UsageError(f"--json does not apply to {args.mode} mode (every line is JSON already)")
    if args.mode == "batch" and "ray" in given and "obs_file" not in given:
        raise UsageError("--ray applies only with --obs-file; it would be ignored")
    for name in ("checkpoint", "model_dir", "model", "onnx", "obs_file", "output", "plot", "ray"):
        if getattr(args, name) is not None and not str(getattr(args, name)).strip():
            raise UsageError(f"{_flag(name)}: empty value")
    for name in ("listen", "http", "grpc"):  # (given several times: each)
        if any(not str(text).strip() for text in getattr(args, name) or ()):
            raise UsageError(f"{_flag(name)}: empty value")
    return args


def _tell(text: str) -> None:
    """One line on stderr, whatever state stderr is in."""
    with contextlib.suppress(Exception):
        print(str(text).replace("\r", "\\r").replace("\n", "\\n"), file=sys.stderr, flush=True)


def _stdout_broken(exc: OSError) -> bool:
    """Whether `exc` came from writing stdout: a pipe without reader, or a path-less full-disk/I-O error (file
    errors carry their path; atomic_write turns its own into UsageError); a failing flush confirms. Then stdout's fd
    is pointed at /dev/null so that the interpreter's final flush does not fail (and print) again."""
    import errno

    broken = (
        sys.stdout is None
        or getattr(sys.stdout, "closed", False)
        or isinstance(exc, BrokenPipeError)
        or exc.filename is None
        and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF, errno.ECONNRESET)
    )
    if not broken:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            broken = True
    if broken and sys.stdout is not None and sys.stdout is sys.__stdout__:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return broken


def _require_torch(mode: str) -> None:
    if mode in TORCH_MODES:
        from ..core.extras import TORCH_HINT, torch_available

        if not torch_available():
            raise UsageError(
                f"--mode {mode} works on ML-Agents' modules rebuilt in torch, which is not installed: {TORCH_HINT}"
            )


def _print_result(args: argparse.Namespace, result: dict, passed: bool, show: Optional[Callable]) -> None:
    if args.json:  # the same result, as one JSON object
        print(json.dumps({"mode": args.mode, "passed": passed, **result}))
    else:
        for line in show(result) if show else ():
            print(line)
        print("SUCCESS" if passed else "FAILED: the check above did not hold")


def _report_check_failed(args: Optional[argparse.Namespace], exc: CheckFailed) -> int:
    if args is not None and args.json and args.mode != "stream":  # --json still gets its one object
        with contextlib.suppress(OSError, ValueError):
            key = "not_this_policy" if isinstance(exc, NotThisPolicy) else "failed"
            print(json.dumps({"mode": args.mode, "passed": False, key: str(exc)}), flush=True)
    _tell(f"FAILED: {exc}")
    return 1


def interrupt_in_chain(exc: BaseException) -> Optional[KeyboardInterrupt]:
    """The KeyboardInterrupt (Ctrl-C, or Interrupted) anywhere in an exception's cause and context chain (at most 100
    links: a cycle ends it), or None."""
    seen = 0
    while exc is not None and seen < 100:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _report_interrupted(exc: KeyboardInterrupt) -> int:
    import signal

    signum = int(getattr(exc, "signum", signal.SIGINT))
    name = {s.value: s.name for s in signal.Signals}.get(signum, f"signal {signum}")
    _tell("interrupted" if signum == signal.SIGINT else f"interrupted by {name}; stopped cleanly")
    return 128 + signum


def _report_os_error(args: Optional[argparse.Namespace], exc: OSError) -> int:
    if _stdout_broken(exc):
        if isinstance(exc, BrokenPipeError) and args is not None and args.mode == "stream":
            return 0  # the controller went away: stream mode's normal end
        _tell(f"error: cannot write to standard output ({exc.strerror or exc}); the result was not delivered")
    else:
        _tell(f"error: {describe_os_error(exc)}")
    return 2


def main(argv: Optional[list[str]] = None) -> int:
    """Exit codes: 0 success, 1 a check did not hold, 2 bad input, usage or environment (one line on stderr, never a
    traceback), 128 + N for signal N (SIGINT 130, SIGHUP 129, SIGTERM 143) after cleanup. The result line (SUCCESS or
    JSON) is flushed inside, so a full or closed stdout is an error, not a silent success."""
    previous = install_signal_handlers()
    args = None
    with warnings.catch_warnings():  # torch's and numpy's warnings would print beside the one line that tells
        warnings.simplefilter("ignore")
        try:
            if sys.stdout is None:  # started with stdout closed (>&-): results would go nowhere
                raise UsageError("standard output is closed; redirect it to a file or /dev/null")
            args = parse_args(sys.argv[1:] if argv is None else argv)
            _require_torch(args.mode)
            # (torch is imported here, by the modes that need it)
            compute, show = mode_functions(args.mode, getattr(args, "ray", None) is not None)
            result, passed = compute(Context(args))
            if result is not None:  # (stream mode answers line by line)
                _print_result(args, result, passed, show)
            sys.stdout.flush()
            return 0 if result is None or passed else 1
        except UsageError as exc:
            _tell(f"error: {exc}")
            return 2
        except CheckFailed as exc:  # e.g. NotThisPolicy: --onnx belongs to another policy
            return _report_check_failed(args, exc)
        except ModuleNotFoundError as exc:  # e.g. torch on a fresh machine
            _tell(f"error: {missing_package(exc.name)}")
            return 2
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP through Interrupted
            return _report_interrupted(exc)
        except OSError as exc:
            return _report_os_error(args, exc)
        except (MemoryError, RecursionError) as exc:
            _tell(
                "error: out of memory; use a smaller --batch or --chunk, or a machine with more memory"
                if isinstance(exc, MemoryError)
                else "error: the input is nested too deeply"
            )
            return 2
        except Exception as exc:  # an interrupt that Python wrapped (a RuntimeError from __set_name__ mid-import, ...)
            interrupt = interrupt_in_chain(exc)
            if interrupt is None:
                raise
            return _report_interrupted(interrupt)
        finally:
            restore_signal_handlers(previous)
