"""After a successful run: the promotion gate, the champion pointer and the MLflow registry."""
