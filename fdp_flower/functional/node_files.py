"""Node-local data files: each SuperNode reads its own curves and responses.

A node file holds curves on a common grid and a scalar response per curve:

- ``.npz``: arrays ``grid`` (G,), ``curves`` (m, G) and ``response`` (m,);
- ``.csv``: a header ``response,t=<t_1>,...,t=<t_G>`` (the grid in the column
  names) and one row per curve;
- ``.parquet``: the same columns as the CSV (needs ``pandas`` and ``pyarrow``).

:func:`read_node_file` validates everything (missing file, wrong columns or
arrays, NaN, grid) and raises :class:`NodeDataError` with one clear line.
:func:`partition` splits a data set into per-node files (``fdp-flower partition``).
"""
from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import itertools
import math
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fdp_flower.functional.design import CurveData, partition_bounds, simulate_slice

FORMATS = ("csv", "npz", "parquet")
RESPONSE_COLUMN = "response"
GRID_PREFIX = "t="
#: Relative tolerance when comparing a file's grid with the expected one.
GRID_RTOL = 1e-9


class NodeDataError(ValueError):
    """A node file that cannot be used; the message names the file and the problem (one line)."""

    def __init__(self, message: str = "") -> None:
        # echoed file content (a quoted header with a newline) must not break the one-line message
        super().__init__(" ".join(str(message).split()))


# ------------------------------------------------------------------ grids
def grid_digest(grid: np.ndarray) -> int:
    """A 62-bit fingerprint of a grid (rounded to 9 significant digits), to compare grids across nodes."""
    text = ",".join(f"{float(t):.9g}" for t in np.asarray(grid, dtype=float))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 2


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex), to tell whether a file changed since it was named."""
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def check_digest(path: str | Path, expected: str | None) -> None:
    """Raise :class:`NodeDataError` if ``path`` is missing or its SHA-256 is not ``expected`` (None: no check)."""
    if expected is None:
        return
    path = Path(path)
    if not path.is_file():
        raise NodeDataError(f"{path}: data file not found")
    if file_digest(path) != expected:
        raise NodeDataError(f"{path}: the file changed since the scenario named it (SHA-256 differs)")


def equispaced_grid(start: float, stop: float, points: int) -> np.ndarray:
    return np.linspace(float(start), float(stop), int(points))


def check_grid(grid: np.ndarray, expected: np.ndarray | None, source: str) -> None:
    """Raise :class:`NodeDataError` unless ``grid`` is increasing and (if given) equals ``expected``."""
    grid = np.asarray(grid, dtype=float)
    if grid.ndim != 1 or grid.size < 3 or not np.all(np.isfinite(grid)) or np.any(np.diff(grid) <= 0):
        raise NodeDataError(f"{source}: the grid must be >= 3 finite, strictly increasing points")
    if expected is None:
        return
    expected = np.asarray(expected, dtype=float)
    if grid.size != expected.size:
        raise NodeDataError(f"{source}: {grid.size} grid points, but the scenario's grid has {expected.size}")
    scale = max(float(np.max(np.abs(expected))), 1.0)
    worst = float(np.max(np.abs(grid - expected)))
    if worst > GRID_RTOL * scale:
        raise NodeDataError(f"{source}: grid differs from the scenario's grid ({expected[0]:g}..{expected[-1]:g}, "
                            f"{expected.size} points) by up to {worst:.3g}")


# ------------------------------------------------------------------ reading
def _format_of(path: Path) -> str:
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise NodeDataError(f"{path}: unknown file type {path.suffix!r}; use one of .csv, .npz, .parquet")
    return suffix


def _columns_to_data(columns: list[str], values: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if RESPONSE_COLUMN not in columns:
        raise NodeDataError(f"{source}: no {RESPONSE_COLUMN!r} column (columns: {', '.join(columns[:5])}"
                            f"{', ...' if len(columns) > 5 else ''})")
    grid_cols = [c for c in columns if c != RESPONSE_COLUMN]
    bad = [c for c in grid_cols if not c.startswith(GRID_PREFIX)]
    if bad:
        raise NodeDataError(f"{source}: column {bad[0]!r} is neither {RESPONSE_COLUMN!r} nor a grid "
                            f"column named '{GRID_PREFIX}<grid point>'")
    try:
        grid = np.array([float(c[len(GRID_PREFIX):]) for c in grid_cols])
    except ValueError:
        raise NodeDataError(f"{source}: grid column names must be '{GRID_PREFIX}<number>'") from None
    idx = [columns.index(c) for c in grid_cols]
    return grid, values[:, idx], values[:, columns.index(RESPONSE_COLUMN)]


def _read_csv(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # utf-8-sig: spreadsheets save a byte-order mark, which would otherwise be part of the first column's name
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
            rows = []
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise NodeDataError(f"{path}: line {line} has {len(row)} fields, the header has {len(header)}")
                try:
                    rows.append([float(v) if v.strip() else math.nan for v in row])
                except ValueError:
                    raise NodeDataError(f"{path}: line {line} has a non-numeric value") from None
        except StopIteration:
            raise NodeDataError(f"{path}: empty file") from None
        except UnicodeDecodeError as exc:
            raise NodeDataError(f"{path}: not a UTF-8 text file (byte {exc.start}: {exc.reason})") from None
        except csv.Error as exc:
            raise NodeDataError(f"{path}: not a readable CSV file ({exc})") from None
    values = np.array(rows, dtype=float).reshape(len(rows), len(header))
    return _columns_to_data(header, values, str(path))


def _read_parquet(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        import pandas as pd
        frame = pd.read_parquet(path)
    except ImportError as exc:
        raise NodeDataError(f"{path}: reading Parquet needs pandas and pyarrow ({exc})") from None
    columns = [str(c) for c in frame.columns]
    try:
        values = frame.to_numpy(dtype=float)
    except (TypeError, ValueError):
        raise NodeDataError(f"{path}: non-numeric column") from None
    return _columns_to_data(columns, values, str(path))


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in ("grid", "curves", "response") if k not in npz.files]
            if missing:
                raise NodeDataError(f"{path}: missing array(s) {', '.join(missing)} "
                                    f"(has: {', '.join(npz.files) or 'none'})")
            arrays = {k: npz[k] for k in ("grid", "curves", "response")}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # a corrupt .npz is a BadZipFile
        if isinstance(exc, NodeDataError):
            raise
        raise NodeDataError(f"{path}: not a readable .npz file ({exc})") from None
    for name, arr in arrays.items():
        # a silent cast would drop an imaginary part (complex) or parse text; refuse both
        if arr.dtype.kind not in "biuf":
            what = "complex" if arr.dtype.kind == "c" else f"non-numeric ({arr.dtype})"
            raise NodeDataError(f"{path}: array {name!r} is {what}; curves, response and grid must be real numbers")
    return tuple(np.asarray(arrays[k], dtype=float) for k in ("grid", "curves", "response"))


def npz_grid_and_size(path: str | Path) -> tuple[np.ndarray, int]:
    """(grid, number of samples) of a node ``.npz`` without reading its curves."""
    path = Path(path)
    if not path.is_file():
        raise NodeDataError(f"{path}: data file not found")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in ("grid", "curves", "response") if k not in npz.files]
            if missing:
                raise NodeDataError(f"{path}: missing array(s) {', '.join(missing)}")
            grid = np.asarray(npz["grid"], dtype=float)
            size = int(np.shape(npz["response"])[0]) if np.ndim(npz["response"]) == 1 else -1
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        if isinstance(exc, NodeDataError):
            raise
        raise NodeDataError(f"{path}: not a readable .npz file ({exc})") from None
    check_grid(grid, None, str(path))
    if size < 1:
        raise NodeDataError(f"{path}: response must be a non-empty 1-d array")
    return grid, size


def read_node_file(path: str | Path, *, expected_grid: np.ndarray | None = None,
                   response_offset: float = 0.0, response_scale: float = 1.0, digest: str | None = None) -> CurveData:
    """Read and validate one node's file; the responses become (y - ``response_offset``) / ``response_scale``
    (public constants);
    ``digest``: the file's expected SHA-256 (:func:`check_digest`)."""
    path = Path(path)
    if not path.is_file():
        raise NodeDataError(f"{path}: data file not found")
    check_digest(path, digest)
    fmt = _format_of(path)
    grid, curves, response = {"csv": _read_csv, "npz": _read_npz, "parquet": _read_parquet}[fmt](path)
    check_grid(grid, expected_grid, str(path))
    if curves.ndim != 2 or curves.shape[1] != grid.size:
        raise NodeDataError(f"{path}: curves must have shape (m, {grid.size}), got {curves.shape}")
    if response.shape != (curves.shape[0],):
        raise NodeDataError(f"{path}: {response.size} responses for {curves.shape[0]} curves")
    if curves.shape[0] < 1:
        raise NodeDataError(f"{path}: no samples")
    for name, arr in (("curves", curves), (RESPONSE_COLUMN, response)):
        bad = ~np.isfinite(arr)
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            raise NodeDataError(f"{path}: {name} contain NaN or infinite values ({int(bad.sum())} "
                                f"entries; first in sample {row})")
    grid = np.asarray(expected_grid, dtype=float) if expected_grid is not None else grid
    return CurveData(curves, standardized_response(response, response_offset, response_scale), grid)


def standardized_response(response: np.ndarray, offset: float = 0.0, scale: float = 1.0) -> np.ndarray:
    """(y - offset) / scale with the public constants of ``data.response_offset`` / ``data.response_scale``
    (unchanged, not copied, for 0 and 1)."""
    if offset == 0 and scale == 1:
        return response
    return (np.asarray(response, dtype=float) - float(offset)) / float(scale)


# ------------------------------------------------------------------ writing
def write_node_file(path: str | Path, data: CurveData) -> Path:
    """Write ``data`` as .csv, .npz or .parquet (by the suffix of ``path``)."""
    path = Path(path)
    fmt = _format_of(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "npz":
        np.savez(path, grid=data.grid, curves=data.curves, response=data.response)
        return path
    header = [RESPONSE_COLUMN] + [f"{GRID_PREFIX}{float(t)!r}" for t in data.grid]
    values = np.column_stack([data.response, data.curves])
    if fmt == "csv":
        with open(path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows([[repr(float(v)) for v in row] for row in values])
        return path
    try:
        import pandas as pd
        pd.DataFrame(values, columns=header).to_parquet(path)
    except ImportError as exc:
        raise NodeDataError(f"{path}: writing Parquet needs pandas and pyarrow ({exc})") from None
    return path


# ------------------------------------------------------------------ data sets and partitions
TECATOR_INSTALL_HINT = ("the Tecator spectra ship inside the sktime wheel: pip install --no-deps 'sktime>=0.30' "
                        "(only its data files are read; sktime itself is never imported)")
TECATOR_WAVELENGTHS = (850.0, 1050.0)


def _parse_ts(path: Path) -> tuple[np.ndarray, np.ndarray]:
    curves, response, in_data = [], [], False
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.lower() == "@data":
            in_data = True
            continue
        if line.startswith("@") or not in_data:
            continue
        series, target = line.rsplit(":", 1)
        curves.append([float(v) for v in series.split(",")])
        response.append(float(target))
    return np.array(curves), np.array(response)


def tecator_files() -> list[Path]:
    """The Tecator .ts files of the installed sktime distribution (train, test)."""
    try:
        dist = importlib.metadata.distribution("sktime")
    except importlib.metadata.PackageNotFoundError:
        raise NodeDataError(f"Tecator: sktime is not installed; {TECATOR_INSTALL_HINT}") from None
    files = [Path(str(dist.locate_file(f"sktime/datasets/data/Tecator/Tecator_{part}.ts")))
             for part in ("TRAIN", "TEST")]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise NodeDataError(f"Tecator: {missing[0]} not found in the installed sktime; {TECATOR_INSTALL_HINT}")
    return files


def load_tecator() -> CurveData:
    """The Tecator data: 215 absorbance spectra at 100 wavelengths (850-1050 nm) and fat content (%).

    Read offline from the files shipped in the ``sktime`` wheel (train then test
    split, in file order).
    """
    parts = [_parse_ts(f) for f in tecator_files()]
    curves = np.vstack([c for c, _ in parts])
    response = np.concatenate([r for _, r in parts])
    if curves.shape[1] != 100:
        raise NodeDataError(f"Tecator: expected 100 wavelengths, got {curves.shape[1]}")
    return CurveData(curves, response, np.linspace(*TECATOR_WAVELENGTHS, curves.shape[1]))


def load_dataset(name: str, *, seed: int = 0, n_samples: int = 3000, tau: float = 0.5,
                 grid_points: int = 100) -> CurveData:
    """A named data set: ``tecator`` or ``paper`` (the design of Zhou & Xiang (2022), ``n_samples`` curves)."""
    if name == "tecator":
        return load_tecator()
    if name == "paper":
        return simulate_slice(seed, 0, n_samples, tau=tau, grid=equispaced_grid(0.0, 1.0, grid_points))
    raise NodeDataError(f"unknown data set {name!r}; choose tecator or paper")


def partition(data: CurveData, nodes: int, *, shuffle_seed: int | None = None) -> list[CurveData]:
    """Even contiguous split into ``nodes`` parts (sizes differ by at most one), after an
    optional seeded shuffle of the samples."""
    order = np.arange(data.n_samples)
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(data.n_samples)
    bounds = partition_bounds(data.n_samples, nodes)
    return [CurveData(data.curves[order[a:b]], data.response[order[a:b]], data.grid)
            for a, b in itertools.pairwise(bounds)]


def write_partitions(parts: Sequence[CurveData], out_dir: str | Path, fmt: str = "npz",
                     stem: str = "node") -> list[Path]:
    """Write ``<out_dir>/<stem>-<i>.<fmt>`` for each part; returns the paths."""
    if fmt not in FORMATS:
        raise NodeDataError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    return [write_node_file(Path(out_dir) / f"{stem}-{i}.{fmt}", part) for i, part in enumerate(parts)]
