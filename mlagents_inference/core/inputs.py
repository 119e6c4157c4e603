"""Observations from --obs words and files: text, images (read as ML-Agents' camera sensor does), .npy/.npz, Parquet."""

import collections
import contextlib
import functools
import math
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from .errors import UsageError
from .extras import import_pyarrow
from .observations import finite_float32, is_float, random_inputs
from .sources import regular_file
from .spec import NORMALIZER_CLIP, InputSpec, PolicySettings

__all__ = [
    "OBS_WORDS",
    "IMAGE_SUFFIXES",
    "boundary_input",
    "parse_obs",
    "parse_one_input",
    "read_input_file",
    "image_pixels",
    "NPZ_EXTRAS",
    "read_npz",
    "open_obs_file",
    "array_chunks",
    "ParquetSource",
]

OBS_WORDS = ("random", "zeros", "ones", "ones_neg", "boundary")


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def boundary_input(spec: InputSpec, normalizer: Optional[tuple]) -> np.ndarray:
    """Every feature on the normaliser's clip edge, running_mean ± 5 standard deviations (+ for even and − for odd
    features), so the normalised input is ±5; ±5 without a normaliser; images alternate 0 and 1."""
    signs = np.where(np.arange(int(np.prod(spec.shape))) % 2 == 0, 1.0, -1.0)
    if spec.kind == "visual":
        return ((signs + 1) / 2).reshape(spec.shape).astype(np.float32)
    if normalizer is None:
        return (NORMALIZER_CLIP * signs).reshape(spec.shape).astype(np.float32)
    mean, std = normalizer  # (Policy.normalizers: float64)
    return (mean + NORMALIZER_CLIP * signs * std).astype(np.float32)


def parse_obs(text: str, settings: PolicySettings, seed: int, normalizers: Callable[[], list]) -> list:
    """--obs for every input: random | zeros | ones | ones_neg | boundary | <number> | <comma-separated numbers> (one
    input) | per input 'obs_0=VALUE;obs_1=VALUE' where VALUE is any of those or a file (.npy, or a .png/.jpg image).
    `normalizers()` gives each input's (mean, std) or None (Policy.normalizers)."""
    s = settings
    if ";" not in text and not re.match(r"^\s*obs_\d+\s*=", text):
        if len(s.inputs) > 1 and text.strip().lower() not in OBS_WORDS and not is_float(text.strip()):
            raise UsageError(
                f"--obs: this policy has {len(s.inputs)} inputs ({', '.join(i.name for i in s.inputs)}); "
                f"give one value per input as 'obs_0=...;obs_1=...'"
            )
        values = {spec.name: text for spec in s.inputs}
    else:
        values = {}
        for part in (p.strip() for p in text.split(";") if p.strip()):
            name, eq, value = part.partition("=")
            name = name.strip()
            if not eq or name not in {i.name for i in s.inputs}:
                raise UsageError(f"--obs: {part[:40]!r} does not name an input ({', '.join(i.name for i in s.inputs)})")
            if name in values:
                raise UsageError(f"--obs: {name} is given twice")
            values[name] = value
        if missing := [i.name for i in s.inputs if i.name not in values]:
            raise UsageError(f"--obs: no value for {', '.join(missing)}; give 'NAME=VALUE' for every input")
    randoms = random_inputs(s, seed)
    norms = normalizers()
    return [parse_one_input(values[spec.name], spec, randoms[i], norms[i]) for i, spec in enumerate(s.inputs)]


def parse_one_input(text: str, spec: InputSpec, random_value: np.ndarray, normalizer: Optional[tuple]) -> np.ndarray:
    word = text.strip().lower()
    count = int(np.prod(spec.shape))
    named = {
        "random": lambda: random_value,
        "zeros": lambda: np.zeros(spec.shape, np.float32),
        "ones": lambda: np.ones(spec.shape, np.float32),
        "ones_neg": lambda: -np.ones(spec.shape, np.float32),
        "boundary": lambda: boundary_input(spec, normalizer),
    }
    if word in named:
        return named[word]()
    if word.endswith(IMAGE_SUFFIXES + (".npy",)):
        return read_input_file(Path(text.strip()), spec)
    items = [p.strip() for p in text.split(",")]
    if len(items) > 1 and items[-1] == "":
        items.pop()  # tolerate one trailing comma
    bad = next((p for p in items if not is_float(p)), None)
    if bad is not None:
        raise UsageError(
            f"--obs {spec.name}: {bad[:40]!r} is not a number; expected random, zeros, ones, ones_neg, "
            f"boundary, one number, {count} comma-separated numbers, or a file"
        )
    values = finite_float32([float(p) for p in items], f"--obs {spec.name}")
    if values.size == 1:
        return np.full(spec.shape, values[0], np.float32)
    if spec.kind == "entities" and values.size % spec.shape[1] == 0 and values.size <= count:
        return values.reshape(-1, spec.shape[1]).astype(np.float32)  # fewer entities: padded later
    if values.size != count:
        raise UsageError(f"--obs {spec.name}: expected {count} numbers (or one), got {values.size}")
    return values.reshape(spec.shape).astype(np.float32)


def read_input_file(path: Path, spec: InputSpec) -> np.ndarray:
    """One observation of one input from a file: .npy, or an image .png/.jpg (channel-first, [0, 1], no resizing)."""
    regular_file(f"--obs {spec.name}:", path)  # (never open a FIFO: it would block)
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise UsageError(f"--obs {spec.name}: {path}: not a readable .npy ({str(exc).splitlines()[0][:100]})")
        if not isinstance(array, np.ndarray):
            array.close()
            raise UsageError(f"--obs {spec.name}: {path}: a .npz archive named .npy; give one .npy array")
        return array
    if spec.kind != "visual":
        raise UsageError(f"--obs {spec.name}: an image file for a {spec.kind} input")
    try:
        from PIL import Image
    except ImportError:
        raise UsageError("reading images needs Pillow (pip install Pillow)")
    channels, height, width = spec.chw
    try:
        with Image.open(path) as image:
            if problem := _image_refusal(image):
                raise UsageError(f"--obs {spec.name}: {path.name} {problem}")
            if image.size != (width, height):
                raise UsageError(
                    f"--obs {spec.name}: {path.name} is {image.size[0]}x{image.size[1]} (W x H), the "
                    f"policy takes {width}x{height}; resize it yourself (nothing is resized silently)"
                )
            pixels = image_pixels(image, channels, f"--obs {spec.name}: {path.name}")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise UsageError(f"--obs {spec.name}: {path}: not a readable image ({str(exc).splitlines()[0][:100]})")
    return pixels if spec.channels_last else pixels.transpose(2, 0, 1).copy()


def _image_refusal(image) -> Optional[str]:
    """Why an opened image file cannot be read as one camera frame as it is, or None: several frames (an animation, a
    multi-page file: which one?), 16 bits per channel (Pillow would cut them to 8), an EXIF orientation other than 1
    (stored turned or mirrored: upright for a photo viewer, as stored for a Unity frame)."""
    frames = getattr(image, "n_frames", 1)
    if frames != 1:
        return f"holds {frames} frames (an animation or a multi-page file); give one frame"
    rawmodes = [
        t[3] if isinstance(t[3], str) else t[3][0] if t[3] and isinstance(t[3][0], str) else "" for t in image.tile
    ]
    if image.mode in ("L", "LA", "P", "RGB", "RGBA") and any(";16" in mode for mode in rawmodes):  # (shown as 8-bit)
        return "has 16 bits per channel; only 8-bit files are read (for other data use .npy)"
    with contextlib.suppress(Exception):  # (an unreadable EXIF block says nothing about orientation)
        orientation = image.getexif().get(0x0112)
        if orientation not in (None, 1):
            return (
                f"has EXIF orientation {orientation} (stored turned or mirrored), ambiguous for a camera "
                f"frame; save it upright without the orientation tag"
            )
    return None


def image_pixels(image, channels: int, what: str) -> np.ndarray:
    """An 8-bit image as [H, W, channels] float32 in [0, 1], read as ML-Agents' camera sensor reads
    a frame: colour as r/255, g/255, b/255 with any alpha left out, and for a grayscale camera
    (r + g + b) / 3 / 255 (ML-Agents' own rule, not Pillow's weighted luma). A 4-channel input
    (grid sensors, match3 boards) takes an RGBA file only; nothing else is made up or dropped."""
    kind = {"1": "grey", "L": "grey", "LA": "grey", "P": "colour", "RGB": "colour", "RGBA": "colour"}.get(image.mode)
    if kind is None:
        raise UsageError(
            f"{what}: Pillow reads it as mode {image.mode}; only 8-bit grey, palette, RGB or RGBA "
            f"files are read (for other data use .npy)"
        )
    if channels == 4:
        if image.mode != "RGBA":
            raise UsageError(
                f"{what} is {kind} ({image.mode}); this 4-channel input takes an RGBA file (or a .npy [4, H, W])"
            )
        return np.asarray(image, np.float32) / np.float32(255)
    if channels == 1:
        if kind == "grey":
            return np.asarray(image.convert("L"), np.float32)[..., None] / np.float32(255)
        rgb = np.asarray(image.convert("RGB"), np.int32)
        return (rgb.sum(axis=2, keepdims=True).astype(np.float32) / np.float32(3)) / np.float32(255)
    if channels == 3:
        if kind == "grey":
            raise UsageError(f"{what} is a grey image; this camera takes colour (3 channels, RGB)")
        return np.asarray(image.convert("RGB"), np.float32) / np.float32(255)
    raise UsageError(f"{what}: a {channels}-channel input cannot come from an image file; use .npy")


NPZ_EXTRAS = ("action_masks", "memory")


def read_npz(path: Path, names: list) -> dict:
    """The arrays of an --obs-file .npz: {"inputs": [...], "action_masks": ..., "memory": ...},
    every member read (and CRC-checked) now. Names other than the inputs' and NPZ_EXTRAS are
    refused (a misspelt action_mask must not be ignored), and so is a name held twice."""
    archive = np.load(path, allow_pickle=False)
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise UsageError(f"--obs-file {path}: a .npy file named .npz; rename it .npy")
    with archive:
        if twice := sorted(m for m, n in collections.Counter(archive.zip.namelist()).items() if n > 1):
            raise UsageError(f"--obs-file {path}: holds {twice[0][:60]!r} more than once")
        keys = list(archive.keys())
        if not keys:
            raise UsageError(f"--obs-file {path}: holds no arrays")
        inputs = list(names)
        if len(names) == 1 and names[0] not in keys:  # one input: obs, or the archive's only array
            alone = [k for k in keys if k not in NPZ_EXTRAS]
            inputs = ["obs"] if "obs" in keys else alone if len(keys) == 1 and alone else inputs
        accepted = names + (["obs"] if len(names) == 1 else []) + list(NPZ_EXTRAS)
        if unknown := [k for k in keys if k not in inputs and k not in NPZ_EXTRAS]:
            raise UsageError(
                f"--obs-file {path}: unknown array{'s' * (len(unknown) > 1)} "
                f"{', '.join(repr(k[:60]) for k in unknown[:4])}; it may hold {', '.join(accepted)}"
            )
        if missing := [n for n in inputs if n not in keys]:
            raise UsageError(
                f"--obs-file {path}: no array {missing[0]}; it holds {', '.join(keys[:6])} "
                f"and the policy takes {', '.join(names)}"
            )
        out = {name: archive[key] for name, key in [*zip(names, inputs), *((e, e) for e in NPZ_EXTRAS if e in keys)]}
    bad = next((k for k, v in out.items() if not isinstance(v, np.ndarray)), None)
    if bad is not None:  # a member not stored as .npy comes back as bytes
        raise UsageError(f"--obs-file {path}: member {bad!r} is not a .npy array")
    return {"inputs": [out[n] for n in names], **{e: out.get(e) for e in NPZ_EXTRAS}}


def open_obs_file(path: Path, settings: PolicySettings) -> dict:
    """Observation arrays for a file batch: .npy (one input, memory-mapped), .csv (one vector
    input), or .npz with obs_0 ... obs_k (or 'obs' for one input) and optional action_masks and
    memory. Returns {"inputs": [...], "action_masks": ..., "memory": ..., "rows": N}."""
    regular_file("--obs-file", path)
    suffix = path.suffix.lower()
    names = [i.name for i in settings.inputs]
    out = {"action_masks": None, "memory": None}
    try:
        if suffix == ".npy":
            out["inputs"] = [np.load(path, mmap_mode="r", allow_pickle=False)]
            if not isinstance(out["inputs"][0], np.ndarray):
                raise UsageError(f"--obs-file {path}: a .npz archive named .npy; rename it .npz")
        elif suffix == ".csv":
            out["inputs"] = [np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)]
        elif suffix == ".npz":
            out.update(read_npz(path, names))
        else:
            raise UsageError(f"--obs-file {path}: expected a .npy, .npz or .csv file")
    except (ValueError, OSError, EOFError, RuntimeError, NotImplementedError, zipfile.BadZipFile, zlib.error) as exc:
        # a damaged, truncated or encrypted archive, a member's bad CRC or unknown compression
        raise UsageError(
            f"--obs-file {path}: not a readable array "
            f"({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
        )
    if suffix != ".npz" and len(names) != 1:
        raise UsageError(f"--obs-file {path}: this policy has {len(names)} inputs; give a .npz with {', '.join(names)}")
    rows, inputs = None, []
    for spec, array in zip(settings.inputs, out["inputs"]):
        if array.dtype.kind not in "fiu":
            raise UsageError(f"--obs-file {path}: {spec.name} holds {array.dtype} values, expected numbers")
        if array.ndim == len(spec.shape) and spec.kind != "entities":
            array = array[None]
        if array.ndim != len(spec.shape) + 1 or (spec.kind != "entities" and array.shape[1:] != tuple(spec.shape)):
            raise UsageError(
                f"--obs-file {path}: {spec.name} has shape {list(array.shape)}, expected "
                f"[rows, {', '.join(map(str, spec.shape))}]"
            )
        if rows is not None and array.shape[0] != rows:
            raise UsageError(f"--obs-file {path}: {spec.name} has {array.shape[0]} rows, {names[0]} has {rows}")
        rows = array.shape[0]
        inputs.append(array)
    if not rows:
        raise UsageError(f"--obs-file {path}: holds no rows")
    out.update(inputs=inputs, rows=rows)
    return out


def array_chunks(data: dict, chunk: int):
    """What batch_file runs from open_obs_file's arrays: (first row, inputs, action masks, memory,
    kept columns (none)), `chunk` rows at a time."""
    for start in range(0, data["rows"], chunk):

        def take(array):
            return None if array is None else np.asarray(array[start : start + chunk])

        yield start, [take(a) for a in data["inputs"]], take(data["action_masks"]), take(data["memory"]), None


def _parquet_files(path: Path) -> list:
    """A .parquet file, or the .parquet files of a folder in name order (their rows in that order); each a regular file
    (a FIFO would block)."""
    if not path.is_dir():
        return [regular_file("--obs-file", path)]
    files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".parquet" and not p.name.startswith("."))
    if not files:
        raise UsageError(f"--obs-file {path}: a folder without .parquet files")
    return [regular_file("--obs-file", p) for p in files]


def _parquet_reader(file: Path):
    """The one way a Parquet file is opened: page checksums verified (pyarrow 15 and later), and a bound on what is
    held that does not grow with the file: no pre-buffering of whole row groups (pyarrow's default), pages read
    through a 1 MiB buffer rather than whole column chunks."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(file, pre_buffer=False, buffer_size=1 << 20, **_checksum_option())


@functools.lru_cache(maxsize=None)
def _checksum_option() -> dict:
    """ParquetFile's page checksum verification, where this pyarrow has it (15 and later); looked up once."""
    import inspect

    import pyarrow.parquet as pq

    return (
        {"page_checksum_verification": True}
        if "page_checksum_verification" in inspect.signature(pq.ParquetFile).parameters
        else {}
    )


def _parquet_layout(type_, shape: tuple, pa) -> Optional[list]:
    """The list lengths a column of this Arrow type holds per row, checked against an input of `shape`: one list level
    of prod(shape) values (flattened, channel-first for an image) or one level per dimension (nested lists). None when
    the type cannot hold it (not lists of numbers, another nesting, a fixed size that differs)."""
    sizes = []
    while pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        sizes.append(type_.list_size if pa.types.is_fixed_size_list(type_) else None)
        type_ = type_.value_type
    if not (pa.types.is_floating(type_) or pa.types.is_integer(type_)):
        return None
    want = [int(np.prod(shape))] if len(sizes) == 1 else list(shape)
    if len(sizes) != len(want) or any(s is not None and s != w for s, w in zip(sizes, want)):
        return None
    return want


def _parquet_values(column, layout: list, shape: tuple, what: str, first_row: Optional[int]) -> np.ndarray:
    """One column of a record batch as float32 [rows, *shape]; UsageError naming the row that is
    null or holds another number of values."""
    import pyarrow.compute as pc

    if hasattr(column, "combine_chunks"):  # a table's column (Ray's batches)
        column = column.combine_chunks()
    rows, stride = len(column), 1

    def row(i: int) -> str:  # (Ray's batches do not know where they start)
        return f"row {first_row + i // stride}" if first_row is not None else "a row"

    for size in layout:
        if column.null_count:
            raise UsageError(f"{what}: {row(int(np.argmin(column.is_valid().to_numpy(zero_copy_only=False))))} is null")
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(lengths != size)
        if bad.size:
            raise UsageError(f"{what}: {row(int(bad[0]))} holds {int(lengths[bad[0]])} values where {size} belong")
        column, stride = column.flatten(), stride * size
    if column.null_count:
        raise UsageError(
            f"{what}: {row(int(np.argmin(column.is_valid().to_numpy(zero_copy_only=False))))} holds a null"
        )
    values = column.to_numpy(zero_copy_only=False)
    if values.dtype != np.uint8:  # (uint8 stays: act() reads a camera's as pixels, x/255, as from any other file)
        with np.errstate(over="ignore"):  # beyond float32 -> inf, refused with the row named
            values = values.astype(np.float32, copy=False)
    return values.reshape(rows, *shape)


def _parquet_footers(files: list, pa) -> tuple:
    """(schema, groups): the schema the files share and each file's row groups' rows, from their footers alone."""
    first, groups = None, []
    for file in files:
        try:
            with _parquet_reader(file) as reader:
                meta, schema = reader.metadata, reader.schema_arrow
                groups.append(tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups)))
        except (pa.ArrowException, OSError, ValueError) as exc:  # (ValueError: a name that is not UTF-8)
            raise UsageError(f"--obs-file {file}: not a readable Parquet file ({str(exc).splitlines()[0][:120]})")
        if sum(groups[-1]) != meta.num_rows:
            raise UsageError(
                f"--obs-file {file}: its footer says {meta.num_rows} rows and its row groups "
                f"{sum(groups[-1])}; a damaged file"
            )
        first = schema if first is None else first
        if not schema.equals(first):
            raise UsageError(f"--obs-file {file}: its columns differ from those of {files[0].name}")
    return first, groups


@dataclass
class ParquetSource:
    """A Parquet dataset read one record batch at a time: obs_0 ... obs_k (or obs), optional
    action_masks and memory, and the columns --keep-columns copies through."""

    files: list
    columns: dict  # input name (obs_0 ..., action_masks, memory) -> (column, list layout, shape)
    keep: list  # column names copied through
    schema: object  # pyarrow schema of the columns read
    rows: int
    groups: tuple = ()  # each file's row groups' rows (their sum is the footer's count: held to it when read)

    @classmethod
    def open(cls, path: Path, settings: PolicySettings, keep: Sequence[str] = ()) -> "ParquetSource":
        pa = import_pyarrow()
        files = _parquet_files(path)
        shapes = {i.name: tuple(i.shape) for i in settings.inputs}
        if settings.discrete_branches:
            shapes["action_masks"] = (sum(settings.discrete_branches),)
        if settings.memory_size:
            shapes["memory"] = (settings.memory_size,)
        first, groups = _parquet_footers(files, pa)
        names, rows = list(first.names), sum(map(sum, groups))
        if twice := [n for n, c in collections.Counter(names).items() if c > 1]:
            raise UsageError(f"--obs-file {path}: holds {twice[0][:60]!r} more than once; name each column once")
        if not rows:
            raise UsageError(f"--obs-file {path}: holds no rows")
        one = len(settings.inputs) == 1
        if one and "obs" in names and settings.inputs[0].name in names:
            raise UsageError(f"--obs-file {path}: holds both obs and {settings.inputs[0].name}; keep one")
        accepted = (["obs"] if one else []) + list(shapes)
        if absent := [k for k in keep if k not in names]:
            raise UsageError(f"--keep-columns: no column {absent[0]!r} in {path}; it holds {', '.join(names[:8])}")
        if unknown := [n for n in names if n not in accepted and n not in keep]:
            raise UsageError(
                f"--obs-file {path}: unknown column(s) {', '.join(unknown[:6])}; accepted: "
                f"{', '.join(accepted)} (name others in --keep-columns to copy them through)"
            )
        if clash := [k for k in keep if k in ("continuous_actions", "discrete_actions", "memory")]:
            raise UsageError(f"--keep-columns: {clash[0]} is a result column's name")
        columns = {}
        for name, shape in shapes.items():
            column = "obs" if one and name == settings.inputs[0].name and "obs" in names else name
            if column not in names:
                if name in ("action_masks", "memory"):
                    continue
                raise UsageError(
                    f"--obs-file {path}: no column {name}; it holds {', '.join(names[:8])} and the "
                    f"policy takes {', '.join(i.name for i in settings.inputs)}"
                )
            layout = _parquet_layout(first.field(column).type, shape, pa)
            if layout is None:
                raise UsageError(
                    f"--obs-file {path}: column {column} is {first.field(column).type}; expected lists "
                    f"of {int(np.prod(shape))} numbers (fixed_size_list<float>"
                    f"{', or nested ' + ' x '.join(map(str, shape)) if len(shape) > 1 else ''})"
                )
            columns[name] = (column, layout, shape)
        read = [c for c, _, _ in columns.values()] + [k for k in keep if k not in columns]
        return cls(files, columns, list(keep), pa.schema([first.field(c) for c in read]), rows, tuple(groups))

    def batches(self, chunk: int, units: Optional[Sequence[tuple]] = None):
        """(first row, record batch) in file order, `chunk` rows at most; a whole file that holds more or fewer rows
        than its footer says is refused (the rows would not be those counted: an output's size, rows of zeros). Or
        of `units` alone, what a Ray task reads: (file, row groups, their first row, record batches skipped, record
        batches read or None: the rest)."""
        import pyarrow as pa

        start, read, counts = 0, self.schema.names, {str(f): sum(g) for f, g in zip(self.files, self.groups)}
        for file, groups, first, skip, take in units or [(file, None, None, 0, None) for file in self.files]:
            start, got, whole = start if first is None else first, 0, groups is None and not skip and take is None
            count = counts.get(str(file), 0) if whole else math.inf
            try:
                with _parquet_reader(file) as reader:
                    for n, batch in enumerate(reader.iter_batches(batch_size=chunk, row_groups=groups, columns=read)):
                        if take is not None and n >= skip + take or (got := got + batch.num_rows) > count:
                            break
                        if n >= skip:
                            yield start, batch
                        start += batch.num_rows
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise UsageError(f"--obs-file {file}: unreadable after row {start} ({str(exc).splitlines()[0][:120]})")
            if whole and got != count:
                raise UsageError(
                    f"--obs-file {file}: holds {'more' if got > count else f'{got}'} rows where its "
                    f"footer says {count}; a damaged file"
                )

    def arrays(self, batch, settings: PolicySettings, start: int) -> tuple:
        """A record batch as (inputs, action masks, memory) arrays."""

        def values(name):
            if name not in self.columns:
                return None
            column, layout, shape = self.columns[name]
            return _parquet_values(batch.column(column), layout, shape, f"--obs-file column {column}", start)

        return [values(i.name) for i in settings.inputs], values("action_masks"), values("memory")

    def chunks(self, chunk: int, settings: PolicySettings, units: Optional[Sequence[tuple]] = None):
        """What batch_file runs: (first row, inputs, action masks, memory, kept columns)."""
        for start, batch in self.batches(chunk, units):
            yield (start, *self.arrays(batch, settings, start), batch.select(self.keep) if self.keep else None)
