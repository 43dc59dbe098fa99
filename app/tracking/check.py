"""Can each configured tracker work? The preflight of MLflow, TensorBoard and W&B.

`trainctl check` prints the verdict and `trainctl train` runs it before Ray starts: for
unattended retraining the tracker is the team's record, and a run meant to be tracked that
was not is lost data (TRAIN_TRACKING_REQUIRED=false opts out). Each probe asks the installed
client itself what it supports (MLflow's own tracking-store registry, not a list kept here),
and every probe that talks to a server runs under TRAIN_TRACKING_TIMEOUT_S: one try, no
retries, and a thread deadline over it all, since a server that accepts TCP and never answers
would otherwise hold the client for its default retries (41 s and more).
"""

from __future__ import annotations

import errno
import importlib.util
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit

from app.errors import ConfigError
from app.redact import redact_text, redact_uri
from app.settings import TrainSettings
from app.storage.location import local_path

OPT_OUT = "or set TRAIN_TRACKING_REQUIRED=false to train without it"
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")
EXPERIMENTS = "/api/2.0/mlflow/experiments"


@dataclass(frozen=True)
class Verdict:
    """One tracker's preflight: what was found, or why it cannot work."""

    name: str
    detail: str = ""
    problem: str | None = None


def configured(env: Mapping[str, str], settings: TrainSettings) -> list[str]:
    """The trackers switched on, by each library's own variable (TensorBoard by a setting)."""
    names = []
    if env.get("MLFLOW_TRACKING_URI"):
        names.append("mlflow")
    if settings.tensorboard:
        names.append("tensorboard")
    if env.get("WANDB_API_KEY") or env.get("WANDB_MODE"):
        names.append("wandb")
    return names


def check_trackers(settings: TrainSettings, env: Mapping[str, str] | None = None) -> list[Verdict]:
    env = os.environ if env is None else env
    probes: dict[str, Callable[[TrainSettings, Mapping[str, str]], str]] = {
        "mlflow": _mlflow,
        "tensorboard": _tensorboard,
        "wandb": _wandb,
    }
    verdicts = []
    for name in configured(env, settings):
        try:
            verdicts.append(Verdict(name, detail=probes[name](settings, env)))
        except ConfigError as err:
            verdicts.append(Verdict(name, problem="; ".join(err.problems)))
    return verdicts


def within(seconds: float, what: str, call: Callable[[], Any]) -> Any:
    """`call()` on a daemon thread, given up after `seconds`: name resolution and TLS have no
    timeout of their own in the HTTP clients, so only a thread bounds the whole exchange."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as err:  # handed to the caller's thread
            outcome["error"] = err

    thread = threading.Thread(target=target, name="tracker-probe", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ConfigError(
            f"{what}: no answer within {seconds:g} s (TRAIN_TRACKING_TIMEOUT_S); check the "
            f"address and that the server is up, raise TRAIN_TRACKING_TIMEOUT_S, {OPT_OUT}"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


# --- MLflow ---------------------------------------------------------------------------------


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
    store = redact_uri(uri) if urlsplit(uri).scheme not in ("", "file") else "sqlite:///mlflow.db"
    fix = (
        f"run `mlflow server --backend-store-uri {store}` where it lasts and set "
        f"MLFLOW_TRACKING_URI=http://<host>:5000 (this client supports {allowed}), {OPT_OUT}"
    )
    from mlflow.store.db.db_types import DATABASE_ENGINES

    if scheme.split("+")[0] in DATABASE_ENGINES:  # sqlite://, postgresql+psycopg2://...
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


def _mlflow(settings: TrainSettings, env: Mapping[str, str]) -> str:
    uri = env["MLFLOW_TRACKING_URI"]
    shown = f"MLFLOW_TRACKING_URI={redact_uri(uri)}"
    if not _installed("mlflow"):
        raise ConfigError(
            f"{shown}: the mlflow package is not installed (the image ships mlflow-skinny); "
            f"install it, unset MLFLOW_TRACKING_URI, {OPT_OUT}"
        )
    experiment = env.get("MLFLOW_EXPERIMENT_NAME") or "trainctl"
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


# --- TensorBoard and W&B ----------------------------------------------------------------------


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module blocked in sys.modules
        return False


def _tensorboard(settings: TrainSettings, env: Mapping[str, str]) -> str:
    if not _installed("tensorboard"):
        raise ConfigError(
            "TRAIN_TENSORBOARD=true: the tensorboard package is not installed; install it "
            f"(`pip install tensorboard`), set TRAIN_TENSORBOARD=false, {OPT_OUT}"
        )
    target = settings.run_dir / "tensorboard"
    local = local_path(target)
    if local is None:
        return f"event files copied to {target} after every epoch (the storage check covers it)"
    # Nothing is created here: the probe file goes into the nearest folder that exists.
    folder = local
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    probe = folder / f".trainctl-write-test-{uuid.uuid4().hex}"
    try:
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "exists but is not a folder")
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"TRAIN_TENSORBOARD=true: the log folder {target} cannot be written ({folder}: "
            f"{err.strerror}); make the run folder under TRAIN_STORAGE_PATH writable, set "
            f"TRAIN_TENSORBOARD=false, {OPT_OUT}"
        ) from None
    return f"{target} writable"


def _wandb(settings: TrainSettings, env: Mapping[str, str]) -> str:
    mode = (env.get("WANDB_MODE") or "").strip()
    switch = f"WANDB_MODE={mode}" if mode else "WANDB_API_KEY is set"
    if mode and mode not in WANDB_MODES:
        raise ConfigError(
            f"WANDB_MODE={mode!r}: W&B's modes are {', '.join(WANDB_MODES[:3])}; {OPT_OUT}"
        )
    if not _installed("wandb"):
        raise ConfigError(
            f"W&B is configured ({switch}) but the wandb package is not installed in this "
            f"image: install wandb, unset WANDB_API_KEY and WANDB_MODE, {OPT_OUT}"
        )
    return f"{switch}, wandb installed (its server is not probed)"
