"""Batch-size buckets, torch-free: the fixed set of batch sizes an engine that compiles or captures one graph per input
shape runs at (the torch engine's device graphs; onnxruntime's CANN graph engine), a call's rows padded to the
smallest bucket that holds them and the answer sliced back (vLLM's and SGLang's capture lists)."""

from __future__ import annotations

import bisect
from typing import Optional

import numpy as np

__all__ = ["MAX_BUCKET", "bucket_sizes", "bucket_of", "padded_rows", "compiles_per_shape"]

MAX_BUCKET = 65_536  # the largest bucket (serve's most rows in one request); a larger call runs at its own size


def bucket_sizes(largest: int = MAX_BUCKET) -> list:
    """The batch sizes: 1, 2, 4, ..., 64, then four steps an octave (80, 96, 112, 128, 160, ...), up to and including
    `largest`: a call's rows padded to the next one waste under a quarter of it."""
    sizes, size = [], 1
    while size < min(64, largest):
        sizes.append(size)
        size *= 2
    while size < largest:
        sizes.append(size)
        size += max(16, 1 << (size.bit_length() - 3))  # (a quarter of the octave the size is in)
    return sizes + [largest]


def bucket_of(sizes: list, rows: int) -> Optional[int]:
    """The smallest of `sizes` (sorted) that holds `rows`; None beyond the largest."""
    at = bisect.bisect_left(sizes, rows)
    return sizes[at] if at < len(sizes) else None


def padded_rows(flat: list, bucket: int, mask_index: Optional[int] = None) -> list:
    """Engine inputs with their rows padded to `bucket`: zeros, and in the action masks (`mask_index`) ones (every
    action allowed, so a padded row computes like any other). The padding rows never reach an answer: the caller
    slices the outputs back to its rows."""
    out = []
    for i, x in enumerate(flat):
        if x.shape[0] == bucket:
            out.append(x)
            continue
        full = np.full((bucket, *x.shape[1:]), 1.0 if i == mask_index else 0.0, dtype=x.dtype)
        full[: x.shape[0]] = x
        out.append(full)
    return out


def compiles_per_shape(session) -> bool:
    """Whether an onnxruntime session's first provider compiles a graph for each new input shape: CANN with its graph
    engine on (enable_cann_graph, default true in onnxruntime's cann_execution_provider_info.cc)."""
    try:
        first = session.get_providers()[0]
        options = session.get_provider_options().get(first, {})
    except Exception:
        return False
    graph = str(options.get("enable_cann_graph", "1")) not in ("0", "false", "False")
    return first == "CANNExecutionProvider" and graph
