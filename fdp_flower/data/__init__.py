"""Data sets for the tabular experiments (UCI Adult, breast cancer)."""
from fdp_flower.data.tabular import (
    ADULT_INSTALL_HINT,
    TabularSplit,
    adult_a9a,
    adult_feature_names,
    encode_adult,
    load_adult_raw,
    load_breast_cancer_binary,
    read_arrays_file,
    train_test_split_binary,
    write_arrays_file,
)

__all__ = [
    "ADULT_INSTALL_HINT",
    "TabularSplit",
    "adult_a9a",
    "adult_feature_names",
    "encode_adult",
    "load_adult_raw",
    "load_breast_cancer_binary",
    "read_arrays_file",
    "train_test_split_binary",
    "write_arrays_file",
]
