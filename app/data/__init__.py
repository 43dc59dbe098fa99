"""Datasets: preparing named ones, inspecting any, and the Ray Data ingest path.

Import from the module that owns a name: `schema` (DatasetInfo, inspect_dataset; no Ray or
torch), `prepare` (ensure_dataset), `pipeline` (build_datasets, epoch_batches) and `cache`
(cache_datasets).
"""
