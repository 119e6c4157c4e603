"""batch: random rows, or a dataset (arrays, CSV, .npz, Parquet) in chunks into an output file; Ray Data (--ray)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import numpy as np

from ..core.errors import UsageError
from ..core.extras import import_pyarrow
from ..core.files import atomic_write, check_output_path, npy_size, open_npy_memmap, refuse_same_file
from ..core.inputs import ParquetSource, array_chunks, open_obs_file
from ..core.observations import check_rows_fit, finite_float32, random_inputs, random_masks
from ..core.report import action_fields, actions_ok, floats, fmt, header, kind_fields
from ..core.spec import PolicySettings, continuous_only
from ..services.ray_replica import ray_policy
from ..services.ray_support import copy_package, ray_failure, ray_init, ray_model, ray_unreachable

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = [
    "mode_batch",
    "show_batch",
    "peak_rss_mb",
    "batch_file",
    "show_batch_file",
    "PolicyActor",
    "read_units",
    "ray_results",
    "ray_to_folder",
]


def _output_writer(path: Path, settings: PolicySettings, arrays: dict) -> Callable:
    """How to write a batch's results: .npy (the continuous actions; mode_batch refused it for other
    policies) or .npz (continuous_actions, discrete_actions, memory)."""
    if path.suffix.lower() == ".npy":
        return lambda tmp: np.save(tmp, arrays["continuous_actions"])
    return lambda tmp: np.savez(tmp, **arrays)


def _result_table(out: dict, kept=None):
    """A chunk's results as a pyarrow table: fixed-size list columns continuous_actions (float32),
    discrete_actions (int64) and memory (float32) as the policy has them, then the kept columns."""
    import pyarrow as pa

    columns = {}
    for name, dtype in (("continuous_actions", np.float32), ("discrete_actions", np.int64), ("memory", np.float32)):
        if name in out:
            values = np.ascontiguousarray(out[name], dtype)
            columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])
    for name in kept.schema.names if kept is not None else ():
        columns[name] = kept.column(name)
    return pa.table(columns)


def _parquet_sink(results: Callable) -> Callable[[Path], None]:
    """atomic_write's writer of a Parquet result: one row group per chunk of results(), in input order."""

    def write(tmp: Path) -> None:
        import pyarrow.parquet as pq

        writer = None
        try:
            for _, out, kept in results():
                table = _result_table(out, kept)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()

    return write


def mode_batch(ctx: Context):
    """--batch N random observations in memory, or --obs-file in chunks to --output."""
    if ctx.args.obs_file:
        return batch_file(ctx)
    s, rows = ctx.settings, ctx.args.batch
    output = check_output_path(ctx.args.output, (".npy", ".npz")) if ctx.args.output else None
    if output is not None and output.suffix.lower() == ".npy" and not continuous_only(s):
        raise UsageError(f"--output {output}: this policy's results are not continuous actions alone; use a .npz file")
    check_rows_fit(rows, s)
    masks = random_masks(s, ctx.args.seed, rows) if ctx.args.mask is None else ctx.masks()
    policy = ctx.policy
    flat, _, _ = policy.prepare(random_inputs(s, ctx.args.seed, rows), masks)
    t0 = time.perf_counter()
    raw = policy.engine.run(flat)  # first (cold) call
    cold_ms = (time.perf_counter() - t0) * 1e3
    warm = []
    for _ in range(10 if rows <= 4096 else 3):
        t0 = time.perf_counter()
        again = policy.engine.run(flat)
        warm.append((time.perf_counter() - t0) * 1e3)
    warm_ms = float(np.median(warm))
    out, repeat = policy.decide(raw, rows), policy.decide(again, rows)
    stable = all(np.array_equal(out[k], repeat[k]) for k in out)
    if output:
        size = npy_size(out["continuous_actions"].shape) if output.suffix.lower() == ".npy" else None
        atomic_write(output, _output_writer(output, s, out), size=size)
    result = {
        "input": "random",
        "rows": rows,
        "batch": rows,
        "seed": ctx.args.seed,
        **action_fields(s, out),
        "cold_ms": cold_ms,
        "warm_ms": warm_ms,
        "warm_calls": len(warm),
        "repeat_identical": stable,
        "output": str(output.resolve()) if output else None,
        "throughput_per_s": rows / (warm_ms / 1e3),
        **kind_fields(s),
        **ctx.base(),
    }
    if "mu" in raw:
        result["mu_abs_max"] = float(np.abs(raw["mu"][: min(rows, 4096)]).max())
    return result, actions_ok(s, out) and stable


def show_batch(r: dict) -> list:
    if r["input"] != "random":
        return show_batch_file(r)
    rows = r["batch"]
    lines = [
        header(r, f"batch inference (batch={rows}, seed={r['seed']})"),
        f"  first (cold) call = {r['cold_ms']:.4f} ms | steady (warm, median of {r['warm_calls']}) = "
        f"{r['warm_ms']:.4f} ms",
        f"  throughput (warm) = {r['throughput_per_s']:,.0f} observations/s",
    ]
    if "continuous_actions" in r:
        actions = np.asarray(r["continuous_actions"], np.float32)
        lines.append("  deterministic[:5, :6] =")
        lines += [f"    batch[{i}] {fmt(actions[i, :6])}" for i in range(min(5, rows))]
        if "mu_abs_max" in r:  # (a file whose graph does not show its mu)
            lines.append(f"  |mu| max (first {min(rows, 4096)} rows) = {r['mu_abs_max']:.4f}")
        lines.append(f"  output range = [{actions.min():.4f}, {actions.max():.4f}]")
    if "discrete_actions" in r:
        lines.append(f"  discrete_actions[:5] = {r['discrete_actions'][:5]} (random masks, seed {r['seed']})")
    lines.append(f"  repeated calls identical = {'yes' if r['repeat_identical'] else 'NO'}")
    if r["output"]:
        lines.append(f"  written: {r['output']}")
    return lines


def peak_rss_mb() -> float:
    """This process's peak resident memory, MB: VmHWM on Linux, which starts afresh at exec (ru_maxrss there carries
    the peak of the process that started this one); elsewhere ru_maxrss (bytes on macOS, KiB otherwise)."""
    with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
        line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024  # kB
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1024)


def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() == ".parquet" or path.is_dir()


def _batch_targets(args, path: Path) -> tuple:
    """(folder, output, keep): a folder for Ray Data to write, or an output file, and the columns to copy. Options
    that cannot apply to them are refused here, before any input is read."""
    folder = Path(args.output) if args.ray and args.output and not Path(args.output).suffix else None
    output = check_output_path(args.output, (".npy", ".npz", ".parquet")) if args.output and not folder else None
    if output is not None and output.suffix.lower() == ".parquet":
        import_pyarrow()  # refused before any work when it is missing
    keep = args.keep_columns or []
    if keep and not (_is_parquet(path) and (folder is not None or output is not None and _is_parquet(output))):
        raise UsageError("--keep-columns: copies columns from a Parquet --obs-file to a Parquet --output")
    if args.ray and not _is_parquet(path):
        raise UsageError(f"--ray: reads Parquet datasets (a .parquet file or a folder of them), not {path.name}")
    return folder, output, keep


def _open_batch_input(path: Path, s: PolicySettings, keep: list) -> tuple:
    """(source, rows, chunks, inputs, held): the ParquetSource (None for arrays, which Ray never reads), the row
    count, chunks(size), the files read (none may be the output) and whether they hold their own action masks."""
    if _is_parquet(path):
        source = ParquetSource.open(path, s, keep)
        return (
            source,
            source.rows,
            lambda size: source.chunks(size, s),
            [path, *source.files],
            "action_masks" in source.columns,
        )
    data = open_obs_file(path, s)
    return None, data["rows"], lambda size: array_chunks(data, size), [path], data["action_masks"] is not None


def _progress_bar(rows: int, chunk: int, args):
    """tqdm's bar on stderr, or None where tqdm is missing."""
    try:
        from tqdm import tqdm

        return tqdm(
            total=rows,
            unit="obs",
            unit_scale=True,
            file=sys.stderr,
            disable=rows < 4 * chunk or not sys.stderr.isatty() and not args.progress,
            mininterval=0.5,
        )
    except ImportError:
        return None


def _local_results(chunks: Callable, chunk: int, s: PolicySettings, path: Path, policy, mask) -> Iterator[tuple]:
    """(first row, results, kept columns) of each chunk, computed in this process."""
    for start, block, masks, memory, kept in chunks(chunk):
        for spec, values in zip(s.inputs, block):  # name the bad row as the file counts it
            if values.dtype.kind == "f":
                finite_float32(values, f"--obs-file {path} ({spec.name})", "row", start)
        try:
            out = policy.act(block if len(block) > 1 else block[0], mask if masks is None else masks, memory=memory)
        except UsageError as exc:
            raise UsageError(f"--obs-file {path}: rows {start}-{start + len(block[0]) - 1}: {exc}")
        yield start, out, kept


def _followed(results: Iterator[tuple], summary: dict, bar) -> Iterator[tuple]:
    """`results` passed on; the summary and the bar follow each chunk once its consumer has written it."""
    for start, out, kept in results:
        yield start, out, kept
        if "continuous_actions" in out:
            summary["min"] = min(summary["min"], float(out["continuous_actions"].min()))
            summary["max"] = max(summary["max"], float(out["continuous_actions"].max()))
        if summary["first"] is None:
            summary["first"] = {k: v[0] for k, v in out.items()}
        if bar is not None:
            bar.update(len(next(iter(out.values()))))


def _write_batch_output(output: Optional[Path], npy: bool, results: Callable, rows: int, s: PolicySettings) -> None:
    """Runs results() to its end, writing to `output` where one is given."""
    if output is None:
        for _ in results():
            pass
    elif npy:

        def write(tmp: Path) -> None:
            target = open_npy_memmap(tmp, (rows, s.continuous_size), np.float32)
            for start, out, _ in results():
                target[start : start + len(out["continuous_actions"])] = out["continuous_actions"]
            target.flush()
            del target

        atomic_write(output, write)
    elif output.suffix.lower() == ".parquet":
        atomic_write(output, _parquet_sink(results))
    else:
        collected: dict = {}
        for _, out, _ in results():
            for key, value in out.items():
                collected.setdefault(key, []).append(value)
        arrays = {k: np.concatenate(v) for k, v in collected.items()}
        atomic_write(output, lambda tmp: np.savez(tmp, **arrays))


def batch_file(ctx: Context):
    """A dataset-sized batch: memory-mapped input (.npy) or Parquet read a record batch at a time,
    chunked inference, results written atomically (.npy through a memory map for continuous-only
    policies, .parquet a row group per chunk, else .npz), progress on stderr."""
    s, args = ctx.settings, ctx.args
    path = Path(args.obs_file)
    folder, output, keep = _batch_targets(args, path)
    source, rows, chunks, inputs, held = _open_batch_input(path, s, keep)
    refuse_same_file(output or folder, inputs)
    mask = ctx.masks()  # one mask for every row the file does not give its own
    if mask is not None and (held or args.ray):
        raise UsageError(
            f"--mask: {path.name} holds its own action_masks; give one or the other"
            if held
            else "--mask: not with --ray; give the dataset an action_masks column"
        )
    if folder is not None:
        return ray_to_folder(ctx, source, folder)
    chunk = args.chunk
    check_rows_fit(min(chunk, rows), s, "--chunk")
    npy = output is not None and output.suffix.lower() == ".npy"
    if npy and not continuous_only(s):
        raise UsageError(f"--output {output}: this policy's results are not continuous actions alone; use a .npz file")
    bar = _progress_bar(rows, chunk, args)
    policy = None if args.ray else ctx.policy  # loaded before any output is opened (Ray's actors load their own)
    summary = {"min": np.inf, "max": -np.inf, "first": None}
    t0 = time.perf_counter()

    def results() -> Iterator[tuple]:  # (first row, results, kept columns); summary and bar follow each chunk written
        yield from _followed(
            ray_results(ctx, source, chunk, ray_info)
            if args.ray
            else _local_results(chunks, chunk, s, path, policy, mask),
            summary,
            bar,
        )

    ray_info: dict = {}
    try:
        _write_batch_output(output, npy, results, rows, s)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    peak_mb = peak_rss_mb()
    first = summary["first"]
    ok = s.tanh_squash or not s.continuous_size or -1.0 <= summary["min"] <= summary["max"] <= 1.0
    return (
        {
            "input": path.name,
            "rows": rows,
            "chunk": chunk,
            "output": str(output.resolve()) if output else None,
            "seconds": seconds,
            "throughput_per_s": rows / seconds,
            "peak_rss_mb": peak_mb,
            "min_action": summary["min"],
            "max_action": summary["max"],
            **{"first_" + k: v for k, v in action_fields(s, first).items()},
            **({"first_action": floats(first["continuous_actions"])} if "continuous_actions" in first else {}),
            **ray_info,
            **ctx.base(),
        },
        ok,
    )


def show_batch_file(r: dict) -> list:
    lines = [header(r, f"file batch ({r['input']}: {r['rows']:,} rows, chunk={r['chunk']:,})")]
    if "first_continuous_actions" in r:
        lines.append(f"  first row actions[:6] = {fmt(r['first_continuous_actions'][:6])}")
        lines.append(f"  output range = [{r['min_action']:.4f}, {r['max_action']:.4f}]")
    if "first_discrete_actions" in r:
        lines.append(f"  first row discrete_actions = {r['first_discrete_actions']}")
    if "ray_nodes" in r:
        lines.append(f"  Ray Data: {r['ray_actors']} policy actor(s) on {r['ray_nodes']} node(s)")
    lines.append(
        f"  time = {r['seconds']:.3f} s | throughput = {r['throughput_per_s']:,.0f} observations/s | "
        f"peak RSS = {r['peak_rss_mb']:.0f} MB"
    )
    lines.append(f"  written: {r['output']}" if r["output"] else "  (no --output: actions not saved)")
    return lines


class PolicyActor:
    """Ray Data's worker: loads the policy once, then reads the units it is given (read_units) as batch_file reads a
    file (ParquetSource.chunks) and yields their results (_result_table), the kept columns, and each row's position in
    the input in the column `order`."""

    def __init__(self, model: dict, source: ParquetSource, chunk: int, order: str):
        self.policy = ray_policy(model)
        self.source, self.chunk, self.order = source, chunk, order

    def __call__(self, units):
        import pyarrow as pa

        units = [(u["file"], u["groups"], u["first"], u["skip"], u["take"]) for u in units.to_pylist()]
        for start, block, masks, memory, kept in self.source.chunks(self.chunk, self.policy.settings, units):
            out = self.policy.act(block if len(block) > 1 else block[0], masks, memory=memory)
            table = _result_table(out, kept)
            yield table.append_column(self.order, pa.array(np.arange(start, start + table.num_rows, dtype=np.int64)))


def read_units(source: ParquetSource, chunk: int, pieces: int) -> list:
    """What each Ray task reads, in input order (ParquetSource.batches' units): runs of whole row groups of `chunk`
    rows or more, a row group of many chunks cut into `pieces` runs of record batches (a task decodes those before its
    own: little beside the policy). Not Ray's read_parquet: it packs row groups into tasks out of input order."""
    units, first = [], 0
    for file, sizes in zip(source.files, source.groups):  # (the row groups ParquetSource.open read, not read again)
        g = 0
        while g < len(sizes):
            end, rows = g + 1, sizes[g]
            while end < len(sizes) and rows < chunk:
                end, rows = end + 1, rows + sizes[end]
            batches = -(-rows // chunk)
            per = -(-batches // pieces) if end == g + 1 else batches
            units += [
                {
                    "file": str(file.resolve()),
                    "groups": list(range(g, end)),
                    "first": first,
                    "skip": b,
                    "take": per if b + per < batches else None,
                }
                for b in range(0, batches, per)
            ]
            first, g = first + rows, end
    return units


def _table_results(table) -> dict:
    """A result table's list columns back as [rows, width] arrays."""
    return {
        name: table.column(name).combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(table.num_rows, -1)
        for name in ("continuous_actions", "discrete_actions", "memory")
        if name in table.column_names
    }


def ray_results(ctx: Context, source: "ParquetSource", chunk: int, info: dict, write_to: Optional[Path] = None):
    """(first row, results, kept columns) in input order from Ray Data: the read units (read_units), map_batches over
    --ray-actors PolicyActors (each takes a GPU, or an NPU, when the policy runs on one), each row's position checked.
    The workers import this package from Ray's working_dir (a copy of it); the checkpoint and the dataset are read at
    the same paths on every node. Fills info with the cluster's size. With write_to, the workers write the results
    there (write_parquet) instead."""
    if ctx.args.ray == "local":  # Ray's servers listen on loopback alone where it expects no cluster (as on macOS)
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import ray.data
    except ImportError:
        raise UsageError("--ray needs Ray Data, which is not installed: pip install -r requirements-ray.txt")
    import logging

    if unreachable := ray_unreachable(ctx.args.ray):
        raise UsageError(f"--ray {ctx.args.ray}: no Ray cluster there ({unreachable})")
    args, device, model = ctx.args, ctx.device, ray_model(ctx)
    # a CPU actor reserves no CPU in Ray's books (SPREAD places them): reserved ones would leave no
    # whole CPU to Ray Data's own tasks (its file listing, write_parquet) on nodes of one or two CPUs: the job would
    # wait
    resources = (
        {"num_gpus": 1}
        if device.type == "cuda"
        else {"resources": {"NPU": 1}}
        if device.type == "npu"
        else {"num_cpus": 0}
    )
    # stdout holds the result alone (--json): Ray's notes there (such as a dead worker's, beside our one line) go
    # nowhere
    with (
        tempfile.TemporaryDirectory(prefix="inference-ray-") as code,
        warnings.catch_warnings(),
        open(os.devnull, "w") as void,
        contextlib.redirect_stdout(void),
    ):
        warnings.simplefilter("ignore")  # Ray Data's advice on block counts and deprecations
        copy_package(Path(code))  # (PolicyActor is pickled by reference: the workers import it from there)
        ray_init(ray, args.ray, code)
        try:
            info.update(ray_nodes=sum(1 for node in ray.nodes() if node.get("Alive")), ray_actors=args.ray_actors)
            if args.ray == "local" and (where := {n["NodeManagerAddress"] for n in ray.nodes()}) != {"127.0.0.1"}:
                raise UsageError(
                    f"the local Ray instance listens on {', '.join(where)}, not on loopback alone (Ray was "
                    "imported before --ray local could keep it there); stopped"
                )
            context = ray.data.DataContext.get_current()
            context.execution_options.preserve_order = True  # rows come back in input order
            context.enable_progress_bars = False
            logging.getLogger("ray.data").setLevel(logging.CRITICAL)  # (a worker's error: our one line says it)
            units = read_units(source, chunk, 2 * args.ray_actors)  # (a file of one row group feeds every actor)
            order = "_row_" + "_".join(source.keep)  # each row's position: longer than any kept column's name
            results = ray.data.from_items(units, override_num_blocks=len(units)).map_batches(
                PolicyActor,
                fn_constructor_args=(model, source, chunk, order),
                batch_size=1,
                batch_format="pyarrow",
                concurrency=args.ray_actors,
                max_restarts=0,
                scheduling_strategy="SPREAD",
                **resources,
            )
            if write_to is not None:
                results.drop_columns([order]).write_parquet(str(write_to))
                return
            start = 0
            for table in results.iter_batches(batch_size=chunk, batch_format="pyarrow"):
                if not np.array_equal(table.column(order).to_numpy(), np.arange(start, start + table.num_rows)):
                    raise UsageError(
                        f"Ray Data returned rows out of input order (row {table.column(order)[0]} "
                        f"where row {start} was due)"
                    )
                table = table.drop_columns([order])
                yield start, _table_results(table), table.select(source.keep) if source.keep else None
                start += table.num_rows
            if start != source.rows:
                raise UsageError(f"Ray Data returned {start} rows of {source.rows}")
        except Exception as exc:
            raise UsageError(f"--ray: {ray_failure(exc)}") from None
        finally:
            ray.shutdown()


def ray_to_folder(ctx: Context, source: "ParquetSource", folder: Path):
    """--ray with an --output folder: Ray Data's write_parquet from the workers, into a temporary
    folder beside it renamed at the end (an existing folder must be empty)."""
    import shutil

    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UsageError(f"--output {folder}: exists and is not an empty folder")
    if not folder.parent.is_dir():
        raise UsageError(f"--output {folder}: folder {folder.parent} does not exist")
    t0, info = time.perf_counter(), {}
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name[:64]}.", dir=folder.parent))
    try:
        for _ in ray_results(ctx, source, ctx.args.chunk, info, write_to=tmp):
            pass
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.perf_counter() - t0
    return (
        {
            "input": Path(ctx.args.obs_file).name,
            "rows": source.rows,
            "chunk": ctx.args.chunk,
            "output": str(folder.resolve()),
            "seconds": seconds,
            "throughput_per_s": source.rows / seconds,
            "peak_rss_mb": peak_rss_mb(),
            **info,
            **ctx.base(),
        },
        True,
    )
