"""The three outcomes a caller can catch: bad input or usage (exit 2), a check that did not hold
(exit 1), and an ONNX that belongs to another policy (exit 1).
"""

__all__ = ["UsageError", "CheckFailed", "NotThisPolicy"]


class UsageError(Exception):
    """Bad input or usage: one line on stderr, exit code 2."""


class CheckFailed(Exception):
    """A check did not hold: exit code 1."""


class NotThisPolicy(CheckFailed):
    """An ONNX that cannot be this checkpoint's (other inputs, other layer shapes): exit code 1,
    never read as "no ONNX" nor blamed on the checkpoint."""
