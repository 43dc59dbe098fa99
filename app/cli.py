"""The `trainctl` command line.

Each command is a thin shell over one module. Heavy imports (ray, torch, kubernetes) happen
inside the commands so that `trainctl env` and bad-input errors answer in well under a second.
Expected failures raise TrainctlError subclasses; `main` turns them into a message on stderr and
the documented exit code, never a traceback.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli_exit import exit_process, run_command
from app.cli_target import DEFAULT_LIMIT, MAX_LIMIT
from app.k8s.values_flags import values_options
from app.settings import NAMED_DATASETS, SEED_MAX, TrainSettings
from app.settings.image_size import IMAGE_SIZE_MAX

if TYPE_CHECKING:
    from app.storage.location import RunPath


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange with nan and inf refused: every comparison with nan is false, so
    `--cpus-per-actor nan` passed its range and failed inside the scoring as an internal error."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number; allowed: {self._describe_range()}.",
                      param, ctx)  # fmt: skip
        return number


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trainctl")
def cli() -> None:
    """Run PyTorch training with Ray Train, locally or as KubeRay RayJobs.

    All training settings come from TRAIN_* environment variables: see `trainctl env`.
    """


@cli.command("prepare-data")
@click.option("--dataset", type=click.Choice(NAMED_DATASETS), help="Built-in dataset.")
@click.option(
    "--from-folder",
    "source",
    help="Image folder (train/<class>/*, valid/<class>/*), local or s3:// / gs://.",
)
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Output folder.")
@click.option("--force", is_flag=True, help="Rewrite even if a complete copy exists.")
@click.option(
    "--seed",
    type=click.IntRange(0, SEED_MAX),
    default=0,
    show_default=True,
    help="Seed (synthetic data only).",
)
@click.option(
    "--image-size",
    type=click.IntRange(0, IMAGE_SIZE_MAX),
    default=0,
    help="--from-folder: side to resize to; 0: the side `train` reads the folder at "
    "(TRAIN_IMAGE_SIZE, else TRAIN_MODEL's and TRAIN_WEIGHTS', from ./.env and the environment).",
)
def prepare_data_cmd(
    dataset: str | None, source: str | None, out: Path, force: bool, seed: int, image_size: int
) -> None:
    """Write DATASET, or an image folder, as Parquet: OUT/train/ and OUT/valid/ with `image`
    and `label` columns (a folder's class names kept in the files' metadata)."""
    if (dataset is None) == (source is None):
        raise click.UsageError("give exactly one of --dataset and --from-folder")
    if source is not None:
        from app.data.prepare_folder import prepare_from_folder_cli

        click.echo(prepare_from_folder_cli(source, out, image_size=image_size, force=force))
        return
    from app.data.kinds import prepare_dataset

    info = prepare_dataset(dataset, out, force=force, seed=seed)  # type: ignore[arg-type]
    click.echo(info)


@cli.command("train", epilog="Settings: run `trainctl env` for every TRAIN_* variable.")
def train_cmd() -> None:
    """Train with the settings in TRAIN_* env vars (and ./.env); resume if the run exists."""
    from app.settings.env import load_settings

    # Settings first: app.run.driver imports torch (seconds), and a bad setting should answer
    # at once.
    train(load_settings())


def train(settings: TrainSettings) -> dict[str, Any]:
    """`trainctl train` once the settings are read: preflight, then the run with what it found
    (the driver imports torch: seconds, after the settings have answered)."""
    from app.preflight import preflight_for_training
    from app.run.driver import run_training
    from app.runfolder.folder import refuse_the_other_kind

    refuse_the_other_kind(settings.run_dir, sweep=False, timeout_s=settings.storage_timeout_s)
    ready = preflight_for_training(settings)
    return run_training(
        settings, ready.info, join_cluster=ready.join_cluster, warm_start=ready.warm_start
    )


@cli.command("tune", epilog="Settings: run `trainctl env` for every TRAIN_* variable.")
def tune_cmd() -> None:
    """Search hyperparameters: trials drawn from TRAIN_TUNE_SPACE, each a normal run in
    <storage>/<TRAIN_RUN_NAME>/trials/, the best one promoted; resume if the sweep exists."""
    from app.settings.env import load_settings

    settings = load_settings()
    from app.settings.tune_space import load_space

    if settings.tune_space is not None:
        load_space(settings.tune_space, settings)  # a bad space answers before torch loads
    from app.sweep.sweep import run_sweep

    run_sweep(settings)


@cli.command("check")
@click.option("--skip-cluster", is_flag=True, help="Do not connect to Ray.")
def check_cmd(skip_cluster: bool) -> None:
    """Preflight: settings, storage, dataset schema, cluster resources and versions."""
    from app.preflight import run_preflight
    from app.settings.env import load_settings

    run_preflight(load_settings(), connect=not skip_cluster)


@cli.command("env")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "markdown", "dotenv"]), default="table"
)
def env_cmd(fmt: str) -> None:
    """List every TRAIN_* variable with its type, default and meaning."""
    from app.envdoc import render_env

    click.echo(render_env(fmt))


@cli.command("render")
@values_options
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Write OUT/<pool>/*.yaml with a kustomization.yaml [default: one YAML stream on stdout].",
)
@click.option(
    "--with-secret",
    is_flag=True,
    help="With --out: also write the Ray auth token Secret the chart generates (without "
    "rayAuth.existingSecret). Keep such a folder out of Git.",
)
@click.option("--release", default="trainctl", show_default=True, help="Release name.")
@click.option("-n", "--namespace", default="default", show_default=True, help="Namespace.")
def render_cmd(
    out: Path | None, with_secret: bool, release: str, namespace: str, **values_args: tuple
) -> None:
    """Render the chart's objects without Helm, from the same values and flags.

    \b
    trainctl render -f a.yaml -f b.yaml --set train.epochs=5 | kubectl apply -f -
    trainctl render -f values.yaml --out manifests   # a kustomization per pool
    """
    from app.errors import ConfigError
    from app.k8s.deprecated import notes
    from app.k8s.manifests_out import (
        SECRET_IN_STREAM,
        earlier_pools,
        render_stream,
        write_manifests,
    )
    from app.k8s.render import load_values
    from app.k8s.value_warnings import value_warnings

    if with_secret and out is None:  # the stream holds the Secret anyway (with a warning)
        raise ConfigError("--with-secret only applies together with --out")
    read_notes: list[str] = []  # a leading-zero number, a key read as a boolean
    values = load_values(**values_args, notes=read_notes)  # -f files and --set*, as Helm takes
    for note in [*read_notes, *notes(values), *value_warnings(values)]:  # NOTES.txt's, and more
        click.echo(f"trainctl: {note}", err=True)
    if out is None:
        text, secrets = render_stream(values, release=release, namespace=namespace)
        for name in secrets:
            click.echo(f"trainctl: warning: {SECRET_IN_STREAM.format(name=name)}", err=True)
        if not text:
            click.echo(
                "trainctl: no node pool is enabled: nothing to render (the train: values are "
                "held to the settings per pool, as each pool's pods read them: enable one to "
                "check them)",
                err=True,
            )
        click.echo(text, nl=False)
        return
    paths = write_manifests(
        values, out, release=release, namespace=namespace, with_secret=with_secret
    )
    pools = sorted({path.parent.name for path in paths})
    click.echo(f"wrote {len(paths)} files for pool(s) {', '.join(pools) or '(none enabled)'}")
    if with_secret and paths and not any(path.name.startswith("secret") for path in paths):
        click.echo(
            "trainctl: warning: --with-secret wrote no Secret: these values generate none "
            "(rayAuth.existingSecret names one, or rayAuth is off)",
            err=True,
        )
    for pool in pools:
        click.echo(f"  kubectl apply -k {out / pool}")
    for folder in earlier_pools(out, pools):
        click.echo(
            f"trainctl: {folder}: a pool folder of an earlier render, whose pool these values "
            "do not enable; left as it is, and still applied by whatever applies the folders "
            f"(kubectl apply -k, a GitOps app): remove it (rm -r {folder}) to retire the pool",
            err=True,
        )


SUBMIT_EPILOG = """\b
Exit codes:
  0  created or attached (without --wait), or the RayJob SUCCEEDED
  1  the RayJob failed (status.reason and status.message are printed)
  2  invalid values, or KubeRay ValidationFailed
  3  --timeout ran out while waiting; the RayJob keeps running
  4  Kubernetes unusable: no kubeconfig, API unreachable, CRD missing, RBAC
"""


@cli.command("submit", epilog=SUBMIT_EPILOG)
@values_options
@click.option("--pool", required=True, help="Node pool whose RayJob to submit.")
@click.option("-n", "--namespace", help="Namespace [default: the kubeconfig's, or the pod's].")
@click.option("--release", default="trainctl", show_default=True, help="Release name.")
@click.option("--run-tag", help="Folded into the run's content hash: a new tag is a new run.")
@click.option("--wait", is_flag=True, help="Follow the RayJob until it ends.")
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloatRange(min=0, min_open=True),
    help="With --wait: give up after SECONDS (exit 3).",
)
@click.option(
    "--storage-mount",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="With --wait: local mount of the shared volume, for epoch lines and the run summary.",
)
@click.option(
    "--poll-interval",
    "poll_s",
    type=FiniteFloatRange(min=0.05),
    default=3.0,
    show_default=True,
    help="With --wait: seconds between status checks.",
)
def submit_cmd(**options: Any) -> None:
    """Create the RayJob for --pool (an existing run is attached to), and follow it."""
    from app.k8s.submit import SubmitRequest, submit

    # The options are named as SubmitRequest's fields (-f files and --set* flags included).
    submit(SubmitRequest(**options), click.echo)


STATUS_EPILOG = """\b
The argument is a run folder (or a folder of them) when it contains '/' or '://'
or names something that exists here (runs/NAME, ./NAME, s3://bucket/runs/NAME),
or with --storage; anything else is a RayJob name.
\b
  trainctl status                       this app's RayJobs (Kubernetes)
  trainctl status RAYJOB -n ml          one RayJob
  trainctl status runs/digits-cnn       one run folder, local or in a bucket
  trainctl status --storage runs        every run folder under runs/, newest first
  trainctl status digits-cnn --storage s3://bucket/runs --json
\b
Exit codes:
  0  shown (whatever the runs' own results)
  1  no such RayJob among this app's
  2  invalid input: a malformed name, a folder that holds no run
  4  Kubernetes unreachable or forbidden (no kubeconfig, RBAC)
"""


@cli.command("status", epilog=STATUS_EPILOG)
@click.argument("target", required=False, metavar="[RUN_DIR | RAYJOB]")
@click.option("-n", "--namespace", help="Namespace [default: the kubeconfig's, or the pod's].")
@click.option("--release", help="Only this release's RayJobs.")
@click.option(
    "--storage-mount",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="RayJobs: local mount of the shared volume, for finished runs' promotion outcome "
    "(runs in a bucket are read there without it).",
)
@click.option(
    "--storage",
    help="Run folders: a folder or s3:// / gs:// URI holding them; lists them all, or with a "
    "run NAME shows that one.",
)
@click.option("--json", "as_json", is_flag=True, help="Run folders: one JSON document.")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    help=f"Run folders: read at most N of a listing, newest first [{DEFAULT_LIMIT}].",
)
def status_cmd(
    target: str | None,
    namespace: str | None,
    release: str | None,
    storage_mount: Path | None,
    storage: str | None,
    as_json: bool,
    limit: int | None,
) -> None:
    """Show runs: this app's RayJobs with their KubeRay status, newest first (and each finished
    run's promotion outcome), or run folders: status, epochs, best and last figures,
    promotion, interruptions and accelerator-hours."""
    from app.cli_target import names_path, rayjob_name

    if storage is not None or (target is not None and names_path(target)):
        if namespace or release or storage_mount:
            raise click.UsageError(
                "-n, --release and --storage-mount are for RayJobs, not run folders"
            )
        from app.run.status import show_status as show_runs
        from app.sweep.status import show_sweep

        if show_sweep(target, storage, click.echo, as_json=as_json):
            return
        show_runs(target, storage, click.echo, as_json=as_json, limit=limit or DEFAULT_LIMIT)
        return
    if as_json or limit is not None:
        raise click.UsageError("--json and --limit are for run folders (a path, or --storage)")
    from app.errors import ClusterError
    from app.k8s.inspect import show_status

    name = rayjob_name(target, "status") if target is not None else None
    try:
        show_status(namespace, release, click.echo, storage_mount, name=name)
    except ClusterError as err:  # a newcomer's first `trainctl status`, on a laptop
        err.problems.append(_run_folders_hint("status", target))
        raise


LOGS_EPILOG = """\b
NAME is a run folder when it contains '/' or '://' or names something that
exists here (runs/NAME, ./NAME, s3://bucket/runs/NAME), or with --storage,
--worker or --driver; anything else is a RayJob name.
\b
  trainctl logs runs/digits-cnn                 the driver's log, newest attempt
  trainctl logs runs/digits-cnn --worker 1 -f   worker rank 1, followed
  trainctl logs digits-cnn --storage s3://bucket/runs --tail 50
  trainctl logs RAYJOB -n ml --head             the Ray head pod's log
\b
Exit codes:
  0  shown
  1  no such RayJob, or no pod to read (not started yet, or removed with its Ray cluster)
  2  invalid input: a malformed name, a folder that holds no run's logs
  4  Kubernetes unreachable or forbidden (no kubeconfig, RBAC)
"""


@cli.command("logs", epilog=LOGS_EPILOG)
@click.argument("name")
@click.option("-n", "--namespace", help="Namespace [default: the kubeconfig's, or the pod's].")
@click.option("--head", "which", flag_value="head", help="RayJob: the Ray head's logs.")
@click.option(
    "--submitter", "which", flag_value="submitter", help="RayJob: the submitter's (default)."
)
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing new lines (until Ctrl-C or SIGTERM)."
)
@click.option(
    "--tail",
    type=click.IntRange(min=0, max=10_000_000),
    help="Run folder: only the last N lines (read from the end of the file).",
)
@click.option(
    "--worker",
    type=click.IntRange(min=0),
    help="Run folder: worker N's log (N = world rank) instead of the driver's.",
)
@click.option("--driver", is_flag=True, help="Run folder: the driver's log (the default).")
@click.option("--attempt", type=click.IntRange(min=1), help="Run folder: attempt K [newest].")
@click.option(
    "--storage",
    help="Run folder: where run folders are, a folder or s3:// or gs:// URI, NAME being a "
    "run name there [TRAIN_STORAGE_PATH, with --worker/--driver].",
)
def logs_cmd(
    name: str,
    namespace: str | None,
    which: str | None,
    follow: bool,
    worker: int | None,
    driver: bool,
    attempt: int | None,
    storage: str | None,
    tail: int | None,
) -> None:
    """Print a run's logs from its run folder (the driver's, or --worker N's), which outlive
    the Ray cluster, streamed with every line's credentials redacted; or a RayJob's (its
    submitter or Ray head pod)."""
    from app.cli_target import names_path, rayjob_name
    from app.formatting import printable_line

    if worker is not None or driver or storage is not None or names_path(name):
        if worker is not None and driver:
            raise click.UsageError("give --worker N or --driver, not both")
        if which or namespace:
            raise click.UsageError("--head/--submitter/-n read pods, not the run folder")
        from app.redact import redact_text
        from app.run import log_lookup
        from app.runfolder import log_reader
        from app.runfolder.log_capture import log_root

        path = log_lookup.log_file(
            log_lookup.resolve_run_dir(name, storage), worker=worker, attempt=attempt
        )
        emit = lambda line: click.echo(printable_line(redact_text(line)))  # noqa: E731
        log_reader.show(path, emit, tail=tail, follow=follow, root=log_root(path))
        return
    if attempt is not None or tail is not None:
        raise click.UsageError(
            f"--attempt and --tail go with --worker or --driver, or a run folder's path; "
            f"{name!r} is read as a RayJob name"
        )
    from app.errors import ClusterError
    from app.k8s.inspect import show_logs

    try:
        pod_line = lambda line: click.echo(printable_line(line))  # noqa: E731
        show_logs(rayjob_name(name, "logs"), namespace, which, follow, pod_line)
    except ClusterError as err:
        err.problems.append(_run_folders_hint("logs", name))
        raise


def _run_folders_hint(command: str, name: str | None) -> str:
    """Where the same command finds local runs, for an error that only speaks of Kubernetes."""
    from app.settings.env import settings_environ, storage_path_setting

    storage = storage_path_setting(settings_environ())
    if name is None:
        return (
            f"runs in a folder need no Kubernetes: `trainctl {command} --storage {storage}`, "
            f"or `trainctl {command} {storage}/NAME`"
        )
    return (
        f"{name!r} was read as a RayJob name; for the run folder give its path: "
        f"`trainctl {command} {storage}/{name}` (or --storage)"
    )


def scoring_options(command: Any) -> Any:
    """The actor-pool options `evaluate` and `predict` share (app/evaluation/scoring.py)."""
    from app.evaluation.scoring import MAX_ACTORS, MAX_BATCH

    options = [
        click.option(
            "--batch-size", type=click.IntRange(1, MAX_BATCH), default=256, show_default=True,
            help="Rows per forward pass of each actor.",
        ),
        click.option(
            "--actors", type=click.IntRange(1, MAX_ACTORS),
            help="Most actors (each loads the model once); the pool starts with one and grows "
            "while rows wait [default: as many as the cluster holds].",
        ),
        click.option(
            "--gpus", is_flag=True, help="One GPU per actor (exit 2 if the cluster has none)."
        ),
        click.option(
            "--cpus-per-actor", type=FiniteFloatRange(0.1, 1024), default=1.0,
            show_default=True, help="CPUs each actor takes (and its torch threads).",
        ),
        click.option(
            "--strict", is_flag=True,
            help="Stop at the first file that cannot be used (default: skip and count it).",
        ),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


@cli.command("predict")
@click.argument("target", metavar="RUN_OR_EXPORT")
@click.argument("images", nargs=-1, required=True, metavar="IMAGE_OR_FOLDER...")
@click.option("--top-k", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.option(
    "--out",
    help="Write every image's top-k to this .parquet or .csv file (local or s3:// / gs://), "
    "with Ray Data batch inference; a file already there is refused without --overwrite.",
)
@click.option("--overwrite", is_flag=True, help="--out: replace the file if it is there.")
@scoring_options
def predict_cmd(
    target: str, images: tuple[str, ...], top_k: int, as_json: bool, out: str | None,
    overwrite: bool, batch_size: int, actors: int | None, gpus: bool, cpus_per_actor: float,
    strict: bool,
) -> None:  # fmt: skip
    """Classify images with a run's export (the run folder, its export/ folder, an s3:// or
    gs:// URI of either, or a run's name under TRAIN_STORAGE_PATH), or the champion's
    (champion:<model-name>, under TRAIN_STORAGE_PATH): checksums checked, then the weights
    loaded (weights_only) into trainctl's own model for the card; nothing in the export can
    run code.

    \b
    A few image files (paths, or objects' URIs) are classified in this process. Folders and
    bucket prefixes (every image below them), more than 64 files, or --out: Ray Data batch
    inference on an actor pool (joins TRAIN_RAY_ADDRESS or RAY_ADDRESS, else starts a local
    Ray).
    """
    import json

    from app.evaluation.batch_predict import batch_predict, takes_batch_path
    from app.settings.env import run_location, settings_environ, storage_access

    env = settings_environ()  # read once: the champion is looked up where its export is read
    endpoint, timeout = storage_access(env)
    card_sha256 = None
    if target.startswith("champion:"):
        model, pointer, _ = _champion(target.removeprefix("champion:"), env, endpoint, timeout)
        card_sha256 = str(pointer["card_sha256"])
    else:
        model = _sweeps_best(run_location(target, env), "predicting with", timeout)
    if takes_batch_path(images, out, pool=gpus or actors is not None):
        from app.evaluation.scoring import ScoringOptions

        options = ScoringOptions(
            batch_size=batch_size, actors=actors, gpus=gpus, cpus_per_actor=cpus_per_actor
        )
        result = batch_predict(
            model, images, top_k, out=out, options=options, strict=strict,
            endpoint=endpoint, card_sha256=card_sha256, overwrite=overwrite, timeout=timeout,
        )  # fmt: skip
        found = result.predictions
        if out is not None and (found or not result.skipped):
            click.echo(result.line())
        else:  # stdout holds the predictions alone: the counts go aside
            if result.not_images:
                click.echo(f"trainctl: {result.passed_over()}", err=True)
            if result.twice:
                from app.export.predict import named_twice

                click.echo(f"trainctl: {named_twice(result.twice)}", err=True)
        if not found and result.skipped:  # nothing scored: a failed batch, not an empty one
            from app.errors import RunFailed

            image, reason = result.skipped[0]
            listed = f"; each reason is in {out}" if out is not None else ""
            first = reason if reason.startswith(image) else f"{image}: {reason}"  # named once
            raise RunFailed(
                f"no image could be scored: all {len(result.skipped):,} were skipped (the first, "
                f"{first}){listed}"
            )
        if out is not None:
            return
    else:
        from app.export.predict import predict

        found = predict(model, images, top_k, endpoint, card_sha256, timeout)
    if as_json:
        click.echo(json.dumps({"predictions": [p.record() for p in found]}, indent=2))
    else:
        for prediction in found:
            click.echo(prediction.line())


def _champion(
    name: str, env: Mapping[str, str], endpoint: str | None, timeout: float
) -> tuple[RunPath, dict[str, Any], RunPath]:
    """(the champion's export folder, the pointer that names it, the storage folder holding
    both), from TRAIN_STORAGE_PATH (through `endpoint`, TRAIN_STORAGE_ENDPOINT, for an
    S3-compatible store) as `env` (settings_environ's) gives it."""
    from app.errors import ConfigError
    from app.promotion.champion import PointerDamaged, champion_export, pointer_path
    from app.promotion.champion_export import folder
    from app.settings.env import storage_location, storage_path_setting
    from app.settings.model import champion_ref
    from app.storage.deadline import DeadlineExceeded, call_with_deadline
    from app.storage.entries import bucket_there
    from app.storage.location import within
    from app.storage.probe import unanswered
    from app.storage.reading import present_within

    try:
        name = champion_ref(f"champion:{name}").name  # a TRAIN_MODEL_NAME, nothing else
    except ValueError as err:
        raise ConfigError(str(err)) from None
    storage = storage_location(storage_path_setting(env), "TRAIN_STORAGE_PATH", endpoint)
    # The store answers within the deadline first, then the pointer's own reads end within it
    # too: a store that answered the probe and then held the pointer's request kept this for a
    # minute of the client's retries (a red-team pass).
    bucket_there(storage, "TRAIN_STORAGE_PATH", timeout)
    present_within(pointer_path(storage, name), "TRAIN_STORAGE_PATH", timeout)
    budgeted = within(storage, timeout)
    try:
        _, pointer = call_with_deadline(
            lambda: champion_export(budgeted, name, endpoint), timeout, f"champion:{name}"
        )
    except PointerDamaged as err:
        raise ConfigError(f"champion:{name}: {err}") from None
    except DeadlineExceeded as err:
        raise unanswered(storage, "TRAIN_STORAGE_PATH", f"champion:{name}", err) from None
    # The model itself is read through the store's own client: a large file may take longer
    # than one request's deadline.
    return folder(storage, name, pointer["card_sha256"]), pointer, storage


def _champion_is_a_run(
    name: str, env: Mapping[str, str], endpoint: str | None, timeout: float
) -> Exception:
    """`evaluate champion:NAME`: evaluate writes its report into a run folder's eval/, so it
    takes the champion's run, which this names (predict takes champion:NAME itself)."""
    from app.errors import ConfigError
    from app.formatting import one_line

    _, pointer, storage = _champion(name, env, endpoint, timeout)  # a champion: pointer, copy
    run = one_line(str(pointer.get("run_name") or "?"), 100)  # another writer's text
    said = (
        f"champion:{name}: evaluate scores a run's export and writes its report into that "
        f"run's eval/; the champion is v{pointer.get('version', '?')} of run {run}"
    )
    named = run not in (".", "..") and "/" not in run and "\\" not in run
    if not named or not _holds_card(storage / run, str(pointer.get("card_sha256"))):
        # Rerun since (another epoch exported), or gone: its folder no longer holds this model.
        return ConfigError(
            f"{said}, whose export/ is no longer the champion's (the run exported again since, "
            f"or is gone): evaluate it there and you score another model; predict "
            f"champion:{name} scores the champion itself"
        )
    return ConfigError(f"{said}: give its folder, {storage / run} (predict takes "
                       f"champion:{name} itself)")  # fmt: skip


def _holds_card(run_dir: RunPath, card_sha256: str) -> bool:
    """Whether the run folder's export/ card is the one of that sha256 (read as every card is,
    app/export/card.py), or for a sweep's folder its best trial's (the one it exported, and
    promotes under the sweep's name); False where it is another, or cannot be read."""
    from app.errors import ConfigError
    from app.export.card import EXPORT_DIR, read_card, sweep_best_trial

    exported = sweep_best_trial(run_dir) or run_dir
    try:
        read_card(exported / EXPORT_DIR, exported, card_sha256)
    except ConfigError:
        return False
    return True


def _sweeps_best(where: RunPath, doing: str, timeout: float) -> RunPath:
    """`where` itself, or where it is a sweep's folder, its best trial (the one the sweep
    exported), said on stderr ("X is a sweep: <doing> its best trial, ..."). A bucket answers
    within `timeout` (TRAIN_STORAGE_TIMEOUT_S) or is refused naming its store: a store down or
    silent read as no sweep after a minute of the client's retries."""
    import contextlib

    from app.export.card import sweep_best_trial
    from app.formatting import shown
    from app.storage.entries import kind_within

    with contextlib.suppress(NotADirectoryError):  # a file on the way: the caller names it
        kind_within(where, "RUN_OR_EXPORT", timeout)
    best = sweep_best_trial(where)
    if best is None:
        return where
    click.echo(f"trainctl: {shown(where)} is a sweep: {doing} its best trial, {best.name}",
               err=True)  # fmt: skip
    return best


@cli.command("evaluate")
@click.argument("run_dir", metavar="RUN")
@click.argument("data", required=False)
@click.option(
    "--split", type=click.Choice(["valid", "test"]),
    help="The run's own validation data, or its dataset's held-out test/ split.",
)  # fmt: skip
@click.option("--name", help="eval/<NAME>/ in the run folder [default: from DATA or --split].")
@click.option(
    "--max-mistakes", type=click.IntRange(0, 1_000_000), default=100, show_default=True,
    help="Rows in mistakes.csv (the most confident mistakes).",
)  # fmt: skip
@click.option(
    "--allow-missing-classes", "allow_missing", is_flag=True,
    help="Evaluate a folder that lacks some of the run's classes.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="metrics.json on stdout.")
@scoring_options
def evaluate_cmd(
    run_dir: str, data: str | None, split: str | None, name: str | None, max_mistakes: int,
    allow_missing: bool, as_json: bool, batch_size: int, actors: int | None, gpus: bool,
    cpus_per_actor: float, strict: bool,
) -> None:  # fmt: skip
    """Score RUN's export on labelled DATA with Ray Data batch inference, and write
    RUN/eval/<name>/: metrics.json (accuracy, top-5, per-class precision/recall/F1,
    calibration), confusion.png and .json, mistakes.csv.

    \b
    DATA: a folder of class folders (DATA/<class>/<image>, e.g. pets/valid) or of Parquet
    files (image and label columns), local or s3:// / gs://; or --split valid for the data
    the run validated on, which reproduces training's val_accuracy. RUN: a run folder, its
    URI, or a run's name under TRAIN_STORAGE_PATH; a sweep's folder means its best trial (the
    one it exported), and its eval/ is that trial's.
    Joins TRAIN_RAY_ADDRESS (or RAY_ADDRESS), else starts a local Ray.
    """
    import json

    from app.evaluation.evaluate import evaluate_command
    from app.evaluation.scoring import ScoringOptions
    from app.settings.env import run_location, settings_environ, storage_access

    env = settings_environ()
    endpoint, timeout = storage_access(env)
    if run_dir.startswith("champion:"):
        raise _champion_is_a_run(run_dir.removeprefix("champion:"), env, endpoint, timeout)
    run = _sweeps_best(run_location(run_dir, env), "evaluating", timeout)  # eval/: the trial's
    options = ScoringOptions(
        batch_size=batch_size, actors=actors, gpus=gpus, cpus_per_actor=cpus_per_actor
    )
    report = evaluate_command(
        run, data, split=split, name=name, options=options, strict=strict,
        max_mistakes=max_mistakes, allow_missing=allow_missing,
    )  # fmt: skip
    if as_json:
        click.echo(json.dumps({"folder": str(report.folder), **report.metrics}, indent=2))
    else:
        click.echo(report.line())


@cli.command("compare")
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option(
    "--out",
    help="The curves' PNG, local or s3:// / gs://; a file already there is refused without "
    "--overwrite  [default: ./compare.png, replaced].",
)
@click.option("--overwrite", is_flag=True, help="--out: replace the file if it is there.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def compare_cmd(runs: tuple[str, ...], out: str | None, overwrite: bool, as_json: bool) -> None:
    """Runs side by side: the settings that differ, final and best metrics, time and
    accelerator-hours, per-class recall from each run's newest evaluation (eval/*/), and one
    PNG with their validation accuracy and loss curves overlaid. Each RUN: a run folder, its
    URI, or a run's name under TRAIN_STORAGE_PATH; a sweep's folder stands for its trials."""
    import json

    from app.evaluation.compare import compare

    found = compare(runs, out, overwrite)
    if as_json:
        click.echo(json.dumps(found.record(), indent=2))
    else:
        for line in found.table():
            click.echo(line)


def run(argv: list[str] | None = None) -> int:
    """Run one command and return its exit code; failures end in a message, not a traceback."""
    return run_command(cli, argv)


def main() -> None:
    exit_process(run())


if __name__ == "__main__":
    main()
