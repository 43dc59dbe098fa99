"""Datasets: the kinds TRAIN_DATASET names, inspecting them, and the Ray Data ingest path.

Import from the module that owns a name: `kinds` (the registry: dataset_kind, build_datasets,
prepare_dataset), `kind` (DatasetKind, the interface each kind implements), `schema`
(DatasetInfo, inspect_dataset; no Ray or torch), `pipeline` (epoch_batches) and `cache`
(cache_datasets).
"""
