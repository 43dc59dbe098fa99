"""The MLflow probe: can MLFLOW_TRACKING_URI's store be built by the installed client, and
does its server answer, read (or create) the experiment, within TRAIN_TRACKING_TIMEOUT_S?

One try per request, no retries, under a thread deadline (app/tracking/probing.py `within`).
The stores the client supports come from MLflow's own tracking-store registry, not a list
kept here. Every URI and server answer shown is redacted (app/redact.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit

from app.errors import ConfigError
from app.redact import redact_text, redact_uri
from app.settings import TrainSettings
from app.tracking.probing import OPT_OUT, installed, within

EXPERIMENTS = "/api/2.0/mlflow/experiments"


def _client_name() -> str:
    for name in ("mlflow", "mlflow-skinny"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "mlflow (not installed)"


def _registry() -> Any:
    from mlflow.tracking._tracking_service import utils

    return utils


def supported_schemes() -> list[str]:
    """The remote schemes the installed client's store registry can build a store for.

    Local stores ('' and file) are left out: they write the driver's own disk (a pod loses
    it), and building one to find out would create its folder."""
    utils = _registry()
    schemes = []
    for scheme in sorted(utils._tracking_store_registry._registry):
        if scheme in ("", "file"):
            continue
        try:
            utils._get_store(f"{scheme}://trainctl-probe")
        except Exception:
            continue
        schemes.append(f"{scheme}://")
    return schemes


def _unsupported(uri: str, err: Exception) -> str:
    shown = f"MLFLOW_TRACKING_URI={redact_uri(uri)}"
    scheme = urlsplit(uri).scheme.lower()
    client = _client_name()
    allowed = ", ".join(supported_schemes())
    from mlflow.store.db.db_types import DATABASE_ENGINES

    # A database URI is a backend store the server can use; any other (ftp://, a path) is not.
    database = scheme.split("+")[0] in DATABASE_ENGINES
    store = redact_uri(uri) if database else "sqlite:///mlflow.db"
    fix = (
        f"run `mlflow server --backend-store-uri {store}` where it lasts and set "
        f"MLFLOW_TRACKING_URI=http://<host>:5000 (this client supports {allowed}), {OPT_OUT}"
    )
    if database:  # sqlite://, postgresql+psycopg2://...
        return (
            f"{shown}: {scheme}:// is a database store, which needs the full mlflow package "
            f"with SQLAlchemy; the installed client is {client}: {fix}"
        )
    if scheme in ("", "file"):
        return (
            f"{shown}: file:// and plain paths are MLflow's local file store, which the "
            f"installed client ({client}) refuses (MLFLOW_ALLOW_FILE_STORE) and a pod loses "
            f"with its disk: {fix}"
        )
    if scheme not in _registry()._tracking_store_registry._registry:
        return f"{shown}: {scheme}:// is not a tracking store {client} knows: {fix}"
    first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return f"{shown}: {client} cannot use it ({redact_text(first.strip())}): {fix}"


def probe_mlflow(settings: TrainSettings, env: Mapping[str, str]) -> str:
    uri = env["MLFLOW_TRACKING_URI"]
    shown = f"MLFLOW_TRACKING_URI={redact_uri(uri)}"
    if not installed("mlflow"):
        raise ConfigError(
            f"{shown}: the mlflow package is not installed (the image ships mlflow-skinny); "
            f"install it, unset MLFLOW_TRACKING_URI, {OPT_OUT}"
        )
    experiment = env.get("MLFLOW_EXPERIMENT_NAME") or "trainctl"
    if problem := experiment_name_problem(experiment):
        raise ConfigError(f"MLFLOW_EXPERIMENT_NAME={shown_name(experiment)}: {problem}, {OPT_OUT}")
    try:
        store = _registry()._get_store(uri)
    except Exception as err:
        raise ConfigError(_unsupported(uri, err)) from None
    from mlflow.store.tracking.rest_store import RestStore

    timeout = settings.tracking_timeout_s
    if not isinstance(store, RestStore):  # a local store the user allowed: no server to ask
        found = store.get_experiment_by_name(experiment)
        return f"{shown}, experiment {experiment} ({'found' if found else 'to be created'})"
    # Two requests at most, each under the timeout; the thread bounds the rest.
    answer = within(2 * timeout + 1, shown, lambda: _experiment(store, experiment, timeout, shown))
    from app.tracking.registry_check import registry_answers

    registry = within(timeout + 1, shown, lambda: registry_answers(store, timeout, shown, OPT_OUT))
    return f"{shown} answers, experiment {experiment} {answer}, {registry}"


MAX_EXPERIMENT_NAME = 256  # MLflow's SQL stores hold an experiment's name in VARCHAR(256)


def experiment_name_problem(name: str) -> str | None:
    """Why MLflow would not take `name` as an experiment's, or create one nobody can find by
    it (blank, or with control characters); None when it would."""
    if not name.strip():
        return "blank: give the experiment a name (unset, it is trainctl)"
    if not name.isprintable():
        return (
            "it holds a control character (a line break, a tab): MLflow's UI and searches "
            "show it as another name"
        )
    if len(name) > MAX_EXPERIMENT_NAME:
        return f"{len(name):,} characters, over the {MAX_EXPERIMENT_NAME} MLflow's stores hold"
    return None


def shown_name(name: str) -> str:
    return repr(name[:60] + ("..." if len(name) > 60 else ""))


def _experiment(store: Any, name: str, timeout: float, shown: str) -> str:
    """Read the experiment, or create it as `train` would; raises ConfigError naming why not."""
    creds = store.get_host_creds()
    found = _request(creds, shown, "GET", "/get-by-name", timeout, params={"experiment_name": name})
    if found is not None:
        return f"found (id {found['experiment']['experiment_id']})"
    made = _request(creds, shown, "POST", "/create", timeout, json={"name": name})
    if made is None:
        raise ConfigError(f"{shown}: experiment {name} is neither readable nor creatable")
    return f"created (id {made['experiment_id']})"


def _request(
    creds: Any, shown: str, method: str, path: str, timeout: float, **kwargs: Any
) -> dict[str, Any] | None:
    """The answer's JSON; None for 'no such experiment'; ConfigError for anything else."""
    from mlflow.utils.rest_utils import http_request

    try:
        answer = http_request(
            creds, EXPERIMENTS + path, method, max_retries=0, backoff_factor=0,
            timeout=timeout, raise_on_status=False, **kwargs,
        )  # fmt: skip
    except Exception as err:
        raise ConfigError(
            f"{shown}: the tracking server cannot be reached ({_why(err, timeout)}); check the "
            f"address and that the server is up, {OPT_OUT}"
        ) from None
    if answer.status_code in (401, 403):
        raise ConfigError(
            f"{shown}: the server refused the credentials (HTTP {answer.status_code}); set "
            f"MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, "
            f"{OPT_OUT}"
        )
    try:
        body = answer.json()
    except ValueError:
        body = None
    if answer.status_code == 404 and isinstance(body, dict) and "error_code" in body:
        return None  # RESOURCE_DOES_NOT_EXIST: the experiment is not there yet
    if answer.status_code != 200 or not isinstance(body, dict):
        text = " ".join(answer.text.split())[:200]
        raise ConfigError(
            f"{shown}: answered {method} {EXPERIMENTS}{path} with HTTP {answer.status_code}, "
            f"not as an MLflow tracking server does; check the address (the server's root URL), "
            f"{OPT_OUT}. It said: {redact_text(text)}"
        )
    return body


def _why(err: Exception, timeout: float) -> str:
    """The reason in a few words where it is a common one; the client's message otherwise."""
    text = str(err)
    if "timed out" in text.lower():
        return f"no answer within {timeout:g} s, TRAIN_TRACKING_TIMEOUT_S"
    for needle, reason in (
        ("Connection refused", "connection refused"),
        ("Name or service not known", "host name not found"),
        ("nodename nor servname", "host name not found"),
        ("CERTIFICATE_VERIFY_FAILED", "certificate not trusted: MLFLOW_TRACKING_SERVER_CERT_PATH"),
    ):
        if needle in text:
            return reason
    return redact_text(text)
