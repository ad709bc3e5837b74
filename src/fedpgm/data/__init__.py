"""Data layer: schemas, the dataset registry and its loaders, and partitioners."""

from fedpgm.data import bayesnet, images, loaders, synthetic  # noqa: F401  (registers the loaders)
from fedpgm.data.dataset import Dataset, impute
from fedpgm.data.partition import (ClientData, Partition, horizontal, hybrid, load_client_files,
                                   partition, read_partition, vertical)
from fedpgm.data.registry import REGISTRY, LoadOptions, dataset_names, load_dataset
from fedpgm.data.schema import Feature, Schema, infer_schema

__all__ = [
    "ClientData", "Dataset", "Feature", "LoadOptions", "Partition", "REGISTRY", "Schema",
    "dataset_names", "horizontal", "hybrid", "impute", "infer_schema", "load_client_files",
    "load_dataset", "partition", "read_partition", "vertical",
]
