#!/usr/bin/env python3
"""Run trained Unity ML-Agents policies outside Unity: CPU, CUDA or Ascend NPU.

    python inference.py --mode info                      # offline, bundled sample
    python inference.py --mode action --obs random --seed 0
    python inference.py --mode onnx-compare --model-dir path/to/ml-agents-run

    import inference                                     # the same policy from Python (docs/python-api.md)
    policy = inference.load("path/to/ml-agents-run")     # or a .pt, or <Behavior>.onnx alone
    out = policy.act(observations, action_masks=None)    # continuous_actions, discrete_actions, memory
    actions = policy.get_action(decision_steps)          # mlagents_envs: an ActionTuple for env.set_actions
    policy = inference.connect("127.0.0.1:8000")         # the same API, served by --mode serve (docs/serve.md)

This file is the entry point: the code lives in the package mlagents_inference/ (docs/architecture.md).
Exit codes: 0 success, 1 a check did not hold, 2 bad input, usage or environment (one line
on stderr), 128 + N after signal N.
"""

import os
import sys


def _stopped_while_starting(signum, frame) -> None:
    """Ctrl-C (or SIGTERM, SIGHUP) while numpy and torch import (~2 s): nothing to clean up
    yet; one line and 128 + N, not a traceback from inside an import."""
    import signal

    os.write(
        2, b"interrupted\n" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}\n".encode()
    )
    os._exit(128 + signum)


if __name__ == "__main__":  # (main() installs the handlers of a running command)
    import signal

    for _name in ("SIGINT", "SIGTERM", "SIGHUP"):
        try:
            signal.signal(getattr(signal, _name), _stopped_while_starting)
        except (AttributeError, ValueError, OSError):
            pass

try:
    from mlagents_inference import __version__
    from mlagents_inference.core.errors import CheckFailed, NotThisPolicy, UsageError
    from mlagents_inference.fronts.cli import main
except ModuleNotFoundError as exc:  # run as a command: one line, not a traceback
    if __name__ != "__main__":
        raise
    sys.stderr.write(  # (the package here, a package it needs not: core.extras names what to install, numpy-free)
        "error: inference.py needs the folder mlagents_inference/ beside it (copy both, or build one file: "
        "python tools/build_pyz.py)\n"
        if exc.name == "mlagents_inference"
        else f"error: {__import__('mlagents_inference.core.extras', fromlist=['_']).missing_package(exc.name)}\n"
    )
    sys.exit(2)

# The public surface (the Python API and the command line); the rest is the package's own and may change.
__all__ = ["load", "connect", "Policy", "Actions", "UsageError", "CheckFailed", "NotThisPolicy", "main", "__version__"]  # noqa: F822


def __getattr__(name: str):
    """load, connect, Policy and Actions on first use: `import inference` alone imports no torch."""
    if name in ("load", "Policy"):
        from mlagents_inference.api import policy

        return getattr(policy, name)
    if name == "connect":  # a policy served by --mode serve (docs/serve.md), torch-free
        from mlagents_inference.fronts.remote import connect

        return connect
    if name == "Actions":
        from mlagents_inference.core.spec import Actions

        return Actions
    raise AttributeError(f"module 'inference' has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
