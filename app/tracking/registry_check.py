"""Preflight for the MLflow Model Registry, which a promoted run registers into
(app/promotion/registry.py): the server must answer its registry API, not only tracking.

Kept apart from app/tracking/check.py (the tracker probes) so that each stays one concern."""

from __future__ import annotations

from typing import Any

from app.errors import ConfigError
from app.redact import redact_text

SEARCH = "/api/2.0/mlflow/registered-models/search"


def registry_answers(store: Any, timeout: float, shown: str, opt_out: str) -> str:
    """'model registry answers', or ConfigError saying why the registry cannot be used."""
    from mlflow.utils.rest_utils import http_request

    try:
        answer = http_request(
            store.get_host_creds(), SEARCH, "GET", max_retries=0, backoff_factor=0,
            timeout=timeout, raise_on_status=False, params={"max_results": 1},
        )  # fmt: skip
    except Exception as err:
        raise ConfigError(
            f"{shown}: the model registry cannot be reached ({type(err).__name__}); {opt_out}"
        ) from None
    if answer.status_code != 200:
        text = redact_text(" ".join(answer.text.split())[:200])
        raise ConfigError(
            f"{shown}: the model registry answered HTTP {answer.status_code} ({text}); a promoted "
            f"run registers its export there: use a server whose backend store holds the "
            f"registry (e.g. --backend-store-uri sqlite:///mlflow.db), {opt_out}"
        )
    return "model registry answers"
