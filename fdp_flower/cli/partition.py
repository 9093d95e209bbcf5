"""``fdp-flower partition``: split a data set into per-node files, to try a deployment.

    fdp-flower partition tecator --nodes 3 --out data/tecator
    fdp-flower partition paper --nodes 3 --out data/paper --n-samples 3000 --format csv
    fdp-flower partition breast_cancer --nodes 3 --out data/bc     # rows: DP-ADMM, peer-to-peer

Each node then gets ``--node-config 'partition-id=i num-partitions=N data-path="<out>/node-i.npz"'``.
"""
from __future__ import annotations

import argparse


def _cmd_partition(args: argparse.Namespace) -> int:
    from fdp_flower.config.base import ScenarioError
    from fdp_flower.functional.node_files import load_dataset, partition, write_partitions
    from fdp_flower.outputs.results import check_output_dir

    for flag, value, least in (("--nodes", args.nodes, 1), ("--grid-points", args.grid_points, 3),
                               ("--n-samples", args.n_samples, 1)):
        if value < least:  # node files need >= 3 grid points (the loader's rule)
            raise ScenarioError(f"partition: {flag} must be >= {least}, got {value}")
    if not 0 < args.tau < 1:
        raise ScenarioError(f"partition: --tau must be in (0, 1), got {args.tau}")
    out = check_output_dir(args.out, "--out")
    # files of an earlier partition would stay beside the new ones (overlapping records, a wrong node count)
    stale = sorted(p.name for p in out.glob("node-*") if p.suffix in (".npz", ".csv", ".parquet"))
    if stale:
        raise ScenarioError(f"partition: --out {args.out} already holds node files ({', '.join(stale[:3])}"
                            f"{', ...' if len(stale) > 3 else ''}); choose another --out or remove them")
    if args.dataset in TABULAR:
        return _partition_rows(args, out)
    data = load_dataset(args.dataset, seed=args.seed, n_samples=args.n_samples, tau=args.tau,
                        grid_points=args.grid_points)
    parts = partition(data, args.nodes, shuffle_seed=args.shuffle_seed)
    paths = write_partitions(parts, args.out, args.format)
    print(f"{args.dataset}: {data.n_samples} curves on {data.grid.size} grid points "
          f"({data.grid[0]:g}..{data.grid[-1]:g}) -> {args.nodes} files")
    for i, (path, part) in enumerate(zip(paths, parts)):
        print(f"  node {i}: {path} ({part.n_samples} samples)  --node-config "
              f"'partition-id={i} num-partitions={args.nodes} data-path=\"{path.resolve()}\"'")
    return 0


#: tabular data sets: rows of features and a response (DP-ADMM / DP-AccADMM and peer-to-peer sites)
TABULAR = ("breast_cancer",)


def _partition_rows(args: argparse.Namespace, out) -> int:
    """A tabular data set into site files of rows (:func:`fdp_flower.data.tabular.write_node_rows`)."""
    import numpy as np

    from fdp_flower.config.base import ScenarioError
    from fdp_flower.data.tabular import load_breast_cancer_binary, write_node_rows

    if args.format == "parquet":
        raise ScenarioError("partition: breast_cancer rows are written as npz or csv (--format parquet is for curves)")
    features, response = load_breast_cancer_binary()
    try:
        paths = write_node_rows(features, response, args.nodes, out, args.format, shuffle_seed=args.shuffle_seed)
    except ValueError as exc:
        raise ScenarioError(f"partition: {exc}") from None
    print(f"{args.dataset}: {len(response)} rows of {features.shape[1]} standardized features, labels in {{-1, +1}} "
          f"-> {args.nodes} files (a DP-ADMM / DP-AccADMM or peer-to-peer scenario of data kind node_files)")
    for i, path in enumerate(paths):
        m = len(np.array_split(np.arange(len(response)), args.nodes)[i])
        print(f"  node {i}: {path} ({m} rows)  --node-config "
              f"'partition-id={i} num-partitions={args.nodes} data-path=\"{path.resolve()}\"'")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("partition", help="split a data set into per-node files (deployment)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=["tecator", "paper", *TABULAR],
                   help="tecator (from the sktime wheel), paper (the simulation design of Zhou & Xiang 2022): "
                        "curves for FDP-ADMM; breast_cancer (scikit-learn's, standardized with the pooled column "
                        "statistics, labels in {-1, +1}): rows for DP-ADMM / DP-AccADMM and peer-to-peer")
    p.add_argument("--nodes", type=int, required=True, help="number of node files")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--format", default="npz", choices=["npz", "csv", "parquet"], help="file type (default: npz)")
    p.add_argument("--shuffle-seed", type=int, default=None,
                   help="shuffle samples with this seed before the even split (default: keep file order)")
    p.add_argument("--seed", type=int, default=0, help="paper design: data seed (default: 0)")
    p.add_argument("--n-samples", type=int, default=3000, help="paper design: total samples (default: 3000)")
    p.add_argument("--tau", type=float, default=0.5, help="paper design: quantile level (default: 0.5)")
    p.add_argument("--grid-points", type=int, default=100, help="paper design: grid points (default: 100)")
    p.set_defaults(func=_cmd_partition)
