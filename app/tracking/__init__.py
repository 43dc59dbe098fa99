"""Experiment tracking from the driver: which trackers run and what they record (trackers.py),
the MLflow / TensorBoard / W&B clients (clients.py), and their preflight (check.py)."""
