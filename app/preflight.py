"""The checks `trainctl check` prints and `trainctl train` runs first: one list, one order.

`check` runs every check and prints each verdict; the chart runs it as the RayJob's first step,
so a bad setting fails before the GPUs are busy. `train` runs the same checks quietly and stops
at the first problem (exit 2, before Ray starts); it prepares a built-in dataset that is not
there yet, where `check` only says it will be. The cluster check comes last in both: `train`
runs it once the run folder is settled, while it may still be stopped cleanly (app/run/driver.py).
With no cluster to join (no TRAIN_RAY_ADDRESS or RAY_ADDRESS), `check` judges the local cluster
`train` would start from what Ray resolves for this machine, without starting it.
`check` also says what the promotion gate is and who the champion is (app/promotion/check.py),
failing on a pointer the promotion step could not use; `train` only warns of it before Ray
starts and leaves the pointer to that step, which reads it again when the run ends and keeps
the champion, with the reason, if it cannot.
Each check returns what it found, in a few words, or raises ConfigError naming the problem
(Warned for one the settings allow: a tracker with TRAIN_TRACKING_REQUIRED=false).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import click

from app.cpus import usable_cpus
from app.data.kind import DatasetKind
from app.data.schema import DatasetInfo
from app.errors import ConfigError
from app.formatting import counted, printable_line
from app.promotion.check import UnguardedChampion, promotion_check
from app.promotion.gate_check import GateAdvice, gate_check
from app.ray_cluster import (
    DATA_CPUS,
    check_capacity,
    connect_ray,
    joined_address,
    oversubscribed,
)
from app.redact import redact_uri
from app.runfolder.folder import failed_on_data, record_invalid, refuse_links
from app.settings import TrainSettings
from app.storage.buckets import ObjectPath
from app.storage.location import (
    RunPath,
    ensure_reachable,
    ensure_writable,
    free_bytes,
    human_bytes,
    local_write_problem,
    prove_writable,
    store_errors,
    within,
)
from app.storage.reading import exists_within
from app.sweep_capacity import Room, connected_room, trials_at_once_in

PINNED = ("ray", "torch", "torchvision")


@dataclass
class Found:
    """What earlier checks learned that later ones use (`train` hands it on as `Ready`)."""

    info: DatasetInfo | None = None
    warm_start: Any = None  # app/training/warm_weights.WarmStart, resolved and verified
    failed: set[str] = field(default_factory=set)  # the checks that failed so far (`check`)
    trials_left: int | None = None  # a sweep's trials still to train (`check` of a sweep)


Check = Callable[[TrainSettings, Found], str]


class Warned(Exception):
    """A problem the settings allow (a tracker with TRAIN_TRACKING_REQUIRED=false): `check`
    prints it as WARN; `train` goes on, and what is switched off warns when the run starts."""


class Advice(Warned):
    """A run that will train but is likely to be wasted (one optimizer step per epoch):
    `check` prints it as WARN, `train` once as `trainctl: warning: ...` before Ray starts."""


def checks(*, prepare: bool, rows_per_worker: bool) -> list[tuple[str, Check]]:
    """The checks that need no cluster, in order. `rows_per_worker`: judge rows per worker with
    the dataset; without it that waits for the cluster check, so that a request the cluster
    never holds is reported once, by the check that can say why."""
    return [
        ("settings", _settings),
        ("storage", _storage),
        ("tracking", _tracking),
        ("dataset", partial(_dataset, prepare=prepare, rows_per_worker=rows_per_worker)),
        ("steps", _steps),
        ("stopping", _stopping),
        ("gate", _gate),
        ("signing", _signing),
        ("warm_start", _warm_start),
        ("weights", _weights),
        ("versions", _versions),
    ]


def run_preflight(settings: TrainSettings, *, connect: bool = True) -> None:
    """`trainctl check`: every check, each verdict printed; ConfigError with all problems."""
    found = Found()
    todo = checks(prepare=False, rows_per_worker=not connect)
    todo[[name for name, _ in todo].index("storage")] = ("storage", _storage_of_check)
    # Per-class counts (reading a Parquet dataset's label columns again): `check` only.
    todo.insert([name for name, _ in todo].index("steps") + 1, ("classes", _classes))
    todo.append(("promotion", _promotion))
    if settings.tune_space is not None:  # `trainctl tune`: the space and every trial drawn
        todo.append(("sweep", _sweep))
    if connect:
        todo.append(("cluster", cluster_check if joins_cluster(settings) else local_cluster_check))
    problems = []
    for name, check in todo:
        try:
            detail = check(settings, found)
        # One line per problem, whatever a setting or a file's name holds (a newline in
        # TRAIN_STORAGE_PATH printed a line of its own that read as another check's verdict);
        # several problems of one check, a line each, rather than one line run together.
        except ConfigError as err:
            problems.extend(err.problems)
            found.failed.add(name)
            for problem in err.problems:
                click.echo(printable_line(f"FAIL  {name}: {problem}"))
        except Warned as warning:
            click.echo(printable_line(f"WARN  {name}: {warning}"))
        else:
            click.echo(printable_line(f"ok    {name}: {detail}"))
    if problems:
        # Each problem is on its FAIL line already: said again on stderr, a failing check
        # printed every problem twice (a red-team pass).
        failed = [name for name, _ in todo if name in found.failed]
        raise ConfigError(
            f"{len(problems)} problem(s) in check(s) {', '.join(failed)}: the FAIL lines on "
            "stdout say each"
        )


@dataclass(frozen=True)
class Ready:
    """What `train`'s preflight found, handed to the driver (app/run/driver.py): the dataset,
    the verified warm start, and the last check, which joins the cluster once the run folder
    is settled (while the run may still be stopped cleanly)."""

    info: DatasetInfo
    warm_start: Any  # app/training/warm_weights.WarmStart, or None
    join_cluster: Callable[[], str]


def preflight_for_training(
    settings: TrainSettings, *, own_folder: bool = False, trackers_checked: bool = False
) -> Ready:
    """`trainctl train`: the same checks but the cluster's, stopping at the first problem (which
    the run folder records, as an invalid start, made for it where the caller owns it: a
    sweep's trial); what they found. `trackers_checked`: a sweep's trial, whose sweep checked
    the trackers before its first trial; one down since is retried as a run's is mid-run (app/
    tracking/trackers.py), where a refusal made every later trial `invalid` (a red-team pass)."""
    found = Found()
    try:
        for name, check in checks(prepare=True, rows_per_worker=False):
            if trackers_checked and name == "tracking":
                continue
            try:
                check(settings, found)
            except Advice as advice:  # said once, here; the run goes on
                click.echo(f"trainctl: warning: {advice}", err=True)
            except Warned:  # said when the run starts (what is switched off)
                pass
    except ConfigError as err:
        record_invalid(settings.run_dir, err, own_folder=own_folder)
        raise
    info = found.info
    assert info is not None  # the dataset check sets it or raises
    _warn_unpromotable(settings, info)
    return Ready(info, found.warm_start, partial(cluster_check, settings, Found(info)))


def _promotion(settings: TrainSettings, found: Found) -> str:
    """The gate and the champion (app/promotion/check.py); WARN for a champion the gate never
    compares with, and for a gate that failed its own check (an `ok` here would read as if the
    gate it names were fine)."""
    if "storage" in found.failed:  # the champions' pointers live there
        return "not judged: the storage fails (above), where the champion's pointer is kept"
    try:
        line = promotion_check(settings, found.info)
    except UnguardedChampion as err:
        raise Warned(str(err)) from None
    if "gate" in found.failed:
        raise Warned(f"{line}; but the gate fails (above): `train` stops before Ray starts")
    return line


def _warn_unpromotable(settings: TrainSettings, info: DatasetInfo) -> None:
    """A champion this run could never replace (another task, a damaged pointer), said before
    Ray starts rather than only after training. A warning, not a stop: the promotion step reads
    the pointer again when the run ends (it may be fixed by then), and a run is worth having
    unpromoted; `check`, which the chart runs first, fails on it."""
    try:
        promotion_check(settings, info)
    except ConfigError as err:
        for problem in err.problems:
            click.echo(f"trainctl: warning: promotion: {problem}", err=True)
    except UnguardedChampion as err:
        click.echo(f"trainctl: warning: promotion: {err}", err=True)


def _sweep(settings: TrainSettings, found: Found) -> str:
    from app.runfolder.folder import read_sweep, refuse_the_other_kind
    from app.runfolder.sweep_records import WARM_START_KEY, left_to_train, refuse_planted_trials
    from app.settings.tune_continuation import same_trials
    from app.settings.tune_plan import plan_sweep, space_warnings

    # As `trainctl tune` refuses first: a sweep never continues into a training run's folder.
    refuse_the_other_kind(settings.run_dir, sweep=True, timeout_s=settings.storage_timeout_s)
    space, trials, per_trial = plan_sweep(settings)
    refuse_planted_trials(settings.run_dir, trials)
    before = read_sweep(settings.run_dir, damaged="`trainctl tune` rebuilds it")
    left = trials
    if before:  # a rerun: it must continue the sweep, as `trainctl tune` will refuse otherwise
        same_trials(settings, before, trials, space)
        left = left_to_train(settings.run_dir, trials, settings.checkpoint_metric, before)
        if left and found.warm_start is not None:  # from the weights its trials started from
            from app.run.warm_start import champion_moved

            if problem := champion_moved(found.warm_start, before.get(WARM_START_KEY)):
                raise ConfigError(problem)
    found.trials_left = len(left)  # the cluster check judges how many train at once
    fits = ""
    if found.info is not None:  # the data inspected: each trial's model held to it, as tune does
        if before:  # a rerun's data held to what its trials trained on, as tune does
            sweep_data(before, found.info, settings)
        trials_fit_the_data(per_trial, found.info, found.warm_start)
        fits = ", each trial's model fits the data" + (
            " and the warm start" if found.warm_start is not None else ""
        )
    said = (
        f"{counted(len(trials), 'trial')} over {', '.join(space)} ({settings.tune_scheduler}), "
        f"each trial's settings valid{fits}"
    )
    advice = [*space_warnings(settings, space), _trials_advice(per_trial, found.info)]
    if advice := "; ".join(filter(None, advice)):
        raise Advice(f"{said}; but {advice}")
    return said


def _trials_advice(per_trial: dict[str, TrainSettings], info: DatasetInfo | None) -> str | None:
    """What the steps and weights checks would warn on for the trials' own settings (the
    base settings' batch size or freeze may be one no trial uses)."""
    from app.training.steps import MIN_STEPS, few_steps

    said = []
    if info is not None:
        batches = sorted(
            {t.global_batch_size for t in per_trial.values()
             if few_steps(info.train_rows, t.global_batch_size, t.workers.max)}
        )  # fmt: skip
        if batches:
            shown = ", ".join(str(b) for b in batches)
            said.append(
                f"trials at TRAIN_GLOBAL_BATCH_SIZE {shown} get fewer than {MIN_STEPS} "
                f"optimizer steps per epoch from {info.train_rows:,} train rows"
            )
    frozen = [trial_id for trial_id, t in per_trial.items() if _head_on_random_features(t)]
    if frozen:
        said.append(
            f"{counted(len(frozen), 'trial')} freeze a backbone with neither TRAIN_WEIGHTS nor "
            f"TRAIN_WARM_START (first {frozen[0]}): only a head trains on random features"
        )
    return "; ".join(said) or None


def sweep_data(
    before: dict[str, Any], info: DatasetInfo, settings: TrainSettings
) -> dict[str, Any]:
    """What sweep.json keeps of the data (sweep_records.data_of); ConfigError where the sweep
    recorded in `before` trained its trials on other files (sweep_records.data_problem)."""
    from app.export.build import data_fingerprint
    from app.runfolder.sweep_records import data_of, data_problem

    data = data_of(data_fingerprint(info))
    if problem := data_problem(before, data, settings.data_path):
        raise ConfigError(problem)
    return data


def trials_fit_the_data(
    per_trial: dict[str, TrainSettings], info: DatasetInfo, warm_start: Any = None
) -> None:
    """Each trial's model checked against the data as `train` checks a run's, and against the
    warm start's weights where one is given, before Ray starts: found inside a trial, the
    problem was a traceback in Tune's log and a trial that never trained."""
    from app.training.model import model_problem

    problems = [
        (trial_id, problem)
        for trial_id, trial in per_trial.items()
        if (problem := model_problem(trial.model, info, trial.vit_patch))
    ]
    if warm_start is not None and not problems:
        from app.run.warm_start import trials_fit_problems

        problems = trials_fit_problems(warm_start, per_trial, info)
    if problems:
        raise ConfigError(by_problem(problems))


def by_problem(problems: list[tuple[str, str]], named: int = 3) -> list[str]:
    """One line per distinct problem, naming the first trials it holds for and how many more:
    5,000 trials of a space that cannot fit printed 5,000 FAIL lines of one cause (a red-team
    pass)."""
    trials: dict[str, list[str]] = {}
    for trial_id, problem in problems:
        trials.setdefault(problem, []).append(trial_id)
    lines = []
    for problem, ids in trials.items():
        more = len(ids) - named
        shown = ", ".join(ids[:named]) + (f" and {counted(more, 'more trial')}" if more > 0 else "")
        lines.append(f"{shown}: {problem}")
    return lines


def _settings(settings: TrainSettings, found: Found) -> str:
    from app.data.kinds import dataset_kind

    workers = settings.workers
    scale = f"{workers.min}-{workers.max} (elastic)" if workers.elastic else str(workers.max)
    device = "GPU" if settings.use_gpu else "CPU"
    noun = "worker" if not workers.elastic and workers.max == 1 else "workers"
    said = (
        f"{settings.model} on {settings.dataset}, {settings.epochs} epochs, {scale} {device} "
        f"{noun}, run {settings.run_name}"
    )
    if settings.image_size and not dataset_kind(settings.dataset).sized_by_setting:
        # A newcomer who set 64 believed the model saw 64-pixel images (a red-team pass).
        raise Advice(
            f"{said}; but TRAIN_IMAGE_SIZE={settings.image_size} does nothing here: it sizes "
            f"image folders (TRAIN_DATASET=folder) only, and TRAIN_DATASET={settings.dataset} "
            "is read at the size its images are stored at (the dataset line says which); unset it"
        )
    return said


def _storage(settings: TrainSettings, found: Found, *, create: bool = True) -> str:
    """The storage folder is writable: made here for `train`; for `check`, which leaves
    nothing behind (a mistyped path is not made), proved writable where it would be made."""
    where, timeout_s = settings.storage_path, settings.storage_timeout_s
    made = ""
    if create:
        ensure_writable(where, "TRAIN_STORAGE_PATH", timeout_s)
    elif prove_writable(where, "TRAIN_STORAGE_PATH", timeout_s):
        made = " (made by the first run)"
    free = free_bytes(where)
    space = "the store reports no free space" if free is None else f"{human_bytes(free)} free"
    refuse_links(settings.run_dir)  # as `train` does before it reads the run folder
    return f"{where} writable{made}, {space}"


def _storage_of_check(settings: TrainSettings, found: Found) -> str:
    """`check`'s storage verdict: also whether `train` would refuse the run folder as a
    sweep's (`tune` refuses the other way round in the sweep check)."""
    from app.runfolder.folder import refuse_the_other_kind

    said = _storage(settings, found, create=False)
    if settings.tune_space is None:
        refuse_the_other_kind(settings.run_dir, sweep=False, timeout_s=settings.storage_timeout_s)
    return said


def _tracking(settings: TrainSettings, found: Found) -> str:
    """Every configured tracker can work: a run meant to be tracked that is not is lost data."""
    from app.tracking.check import check_trackers

    verdicts = check_trackers(settings)
    if not verdicts:
        return (
            "none configured (MLFLOW_TRACKING_URI, WANDB_API_KEY or WANDB_MODE, TRAIN_TENSORBOARD)"
        )
    problems = [v.problem for v in verdicts if v.problem]
    if problems and settings.tracking_required:
        raise ConfigError(problems)
    detail = "; ".join(f"{v.name}: {v.problem or v.detail}" for v in verdicts)
    if problems:
        raise Warned(f"{detail} (TRAIN_TRACKING_REQUIRED=false: training goes on without it)")
    return detail


def _dataset(settings: TrainSettings, found: Found, *, prepare: bool, rows_per_worker: bool) -> str:
    from app.data.kinds import dataset_kind

    kind = dataset_kind(settings.dataset)
    folder = kind.location(settings.data_path)
    ensure_reachable(folder, "TRAIN_DATA_PATH", settings.storage_timeout_s)
    with store_errors(folder, "TRAIN_DATA_PATH"):  # a bucket that cannot be read
        return _dataset_in(kind, folder, settings, found, prepare, rows_per_worker)


def _dataset_in(
    kind: DatasetKind,
    folder: Path | ObjectPath,
    settings: TrainSettings,
    found: Found,
    prepare: bool,
    rows_per_worker: bool,
) -> str:
    from app.run.resume import other_task
    from app.runfolder.class_names import class_names_problem
    from app.training.model import model_problem

    if not prepare and kind.to_prepare(folder):  # a built-in dataset not there yet
        # What `train` would meet first, found as the tracking check finds it: nothing is made.
        if problem := local_write_problem(folder):
            raise ConfigError(f"TRAIN_DATA_PATH={folder}: cannot create the folder ({problem})")
        return f"{settings.dataset} not prepared yet; `trainctl train` will write it to {folder}"
    info, note = kind.ensure(folder, settings)
    found.info = info
    problem = None
    # The run folder's records: not read below a storage path that failed (a file there read
    # as a damaged summary, `check` said, with a warning that no run could act on).
    if "storage" not in found.failed:
        _still_bad(kind, info, settings.run_dir)
        problem = class_names_problem(settings.run_dir, info.class_names, info.path)
        problem = problem or other_task(settings, info)  # the checkpoints' model and task
    problem = problem or model_problem(settings.model, info, settings.vit_patch)
    if rows_per_worker:
        problem = problem or workers_problem(settings, info)
    if problem:
        raise ConfigError(problem)
    return (
        f"{folder}: {info.train_rows} train / {info.valid_rows} valid rows"
        + (f" / {info.test_rows} held-out test rows" if info.test_rows is not None else "")
        + f", {info.height}x{info.width}x{info.channels} images ({info.layout}), "
        f"{info.num_classes} classes" + (f"; {note}" if note else "")
    )


def _still_bad(kind: DatasetKind, info: DatasetInfo, run_dir: RunPath) -> None:
    """ConfigError where the run's last attempt failed on its data and the data is still bad:
    a retry (KubeRay's backoffLimit, a rerun) would train until it met the same image again,
    since the checks above decode only a sample. Data fixed since, or a search that runs out
    of time, goes on."""
    if failed_on_data(run_dir) is None:
        return
    where = kind.locate_bad_image(info)
    if where is not None:
        raise ConfigError(
            f"the run's last attempt failed on its data, and it is still bad: {where}; fix or "
            "remove it, then rerun (a retry would only fail the same way, after training to it)"
        )


def _steps(settings: TrainSettings, found: Found) -> str:
    """Optimizer steps per epoch, and Advice when they are too few to learn from."""
    from app.training.steps import few_steps, steps_with, uneven_split

    if found.info is None:
        return "not judged: the dataset is not inspected yet"
    rows, batch, workers = found.info.train_rows, settings.global_batch_size, settings.workers
    advice = few_steps(rows, batch, workers.max) or uneven_split(batch, workers.max)
    if advice:
        raise Advice(advice)
    steps = steps_with(rows, batch, workers.max)
    per_epoch = f"{steps:,} optimizer steps per epoch"
    return f"{rows:,} train rows at TRAIN_GLOBAL_BATCH_SIZE={batch}: {per_epoch}"


def _stopping(settings: TrainSettings, found: Found) -> str:
    """TRAIN_STOP_AT and TRAIN_PATIENCE as they will be judged; Advice where they never can."""
    from app.training.early_stop import advice, described, rule_of

    rule = rule_of(settings)
    said = advice(rule, settings.epochs)
    if said:
        raise Advice(said)
    return described(rule, settings.epochs)


def _classes(settings: TrainSettings, found: Found) -> str:
    """Images per class in train/ and valid/; WARN for a class too small to learn or measure."""
    from app.data.class_counts import class_counts

    if found.info is None:
        return "not counted: the dataset is not inspected yet"
    counts = class_counts(found.info)
    warning = counts.warning()
    if warning:
        raise Warned(f"{counts.detail()}; {warning}")
    return counts.detail()


def _gate(settings: TrainSettings, found: Found) -> str:
    """TRAIN_PROMOTE_IF as it will be judged; a term naming a class the data lacks: exit 2;
    a term every model meets or that rewards a worse one: a warning."""
    try:
        return gate_check(settings, found.info)
    except GateAdvice as advice:
        raise Advice(str(advice)) from None


def _signing(settings: TrainSettings, found: Found) -> str:
    """TRAIN_SIGNING_KEY and TRAIN_VERIFY_KEY load and are a pair (app/export/signature.py);
    WARN for checkpoints in the run folder that `train` will set aside, having no witness of
    this run's training (app/export/witness.py)."""
    from app.export.signature import configuration
    from app.export.witness import unwitnessed
    from app.runfolder.checkpoints import recorded

    line = configuration(settings.signing_key, settings.verify_key)
    if settings.signing_key is None:  # every checkpoint is usable as its checksums say
        return line
    if "storage" in found.failed:  # its failure says why; another try would only wait again
        return f"{line}; the run's checkpoints not inspected: the storage fails (above)"
    run_dir = within(settings.run_dir, settings.storage_timeout_s)
    with store_errors(settings.run_dir, "TRAIN_STORAGE_PATH"):
        good = recorded(run_dir)
        refused = unwitnessed(good, settings.signing_key)
    if refused:
        names = ", ".join(ref.path.name for ref, _ in refused[:3])
        more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
        every = len(refused) == len(good)
        then = (
            "starts over: none is witnessed" if every else "resumes from the newest witnessed one"
        )
        raise Warned(
            f"{line}; {len(refused)} checkpoint(s) of run {settings.run_name} are not witnessed "
            f"({names}{more}; the first: {refused[0][1]}): `train` sets them aside and {then}"
        )
    return line


def _warm_start(settings: TrainSettings, found: Found) -> str:
    """TRAIN_WARM_START resolves (a run folder, a checkpoint, an export, a champion, a file),
    its checksums hold, its task is this run's and (once the data is known) its weights fit
    the model: named here, before Ray starts, not by every worker's load."""
    from app.run.warm_start import FILE_VOUCH, TAKES, resolve
    from app.settings.model import ChampionRef

    path = settings.warm_start
    if path is None:
        return "none (TRAIN_WARM_START is not set)"
    if not isinstance(path, ChampionRef) and not exists_within(
        path, "TRAIN_WARM_START", settings.storage_timeout_s
    ):
        raise ConfigError(
            f"TRAIN_WARM_START={redact_uri(str(path))}: no such checkpoint or file; {TAKES}"
        )
    store = settings.storage_path if isinstance(path, ChampionRef) else path
    with store_errors(store, "TRAIN_WARM_START"):  # only a bucket's client raises here
        found.warm_start = warm = resolve(settings, found.info)
    fits = "; fits the model" if found.info else "; fit checked once the data is prepared"
    # A plain file has no record of its checksum: its hash is what every worker must load.
    checked = "verified" if warm.vouched_by != FILE_VOUCH else "(a plain file: nothing to verify)"
    return (
        f"{warm.described}: {redact_uri(str(warm.file))}, sha256 {warm.sha256[:12]} {checked}{fits}"
    )


def _weights(settings: TrainSettings, found: Found) -> str:
    """TRAIN_WEIGHTS resolves, is cached or downloads, loads, and fits (app/training/weights)."""
    from app.training.weights import by_name, check_weights, weights_source

    if _head_on_random_features(settings):
        raise Advice(
            "TRAIN_FREEZE=backbone with neither TRAIN_WEIGHTS nor TRAIN_WARM_START: only the "
            "new head trains, on a randomly initialised backbone that never learns; give "
            "pretrained weights, or TRAIN_FREEZE=none"
        )
    source = weights_source(settings)
    if source is None or by_name(source):
        return check_weights(settings, found.info)
    if not exists_within(source, "TRAIN_WEIGHTS", settings.storage_timeout_s):
        raise ConfigError(f"TRAIN_WEIGHTS={redact_uri(str(source))}: no such file")
    with store_errors(source, "TRAIN_WEIGHTS"):  # only a bucket's client raises here
        return check_weights(settings, found.info)


def _head_on_random_features(settings: TrainSettings) -> bool:
    """A frozen backbone with nothing to start from: only a head trains, on random features."""
    return (
        settings.freeze == "backbone" and settings.weights is None and settings.warm_start is None
    )


def workers_problem(settings: TrainSettings, info: DatasetInfo) -> str | None:
    """Every worker needs rows of each split; None when it gets them.

    Ray splits each dataset evenly across workers: a rank with no rows would "train" on
    nothing, and the run would still report success.
    """
    workers = settings.workers.max
    if min(info.train_rows, info.valid_rows) >= workers:
        return None
    return (
        f"TRAIN_NUM_WORKERS={settings.num_workers}: {workers} workers need at least one row "
        f"each, but train has {info.train_rows} rows and valid {info.valid_rows}; use fewer "
        "workers or more data"
    )


def _versions(settings: TrainSettings, found: Found) -> str:
    pins = _pins()
    versions = []
    for name in PINNED:
        installed = metadata.version(name)
        wanted = pins.get(name)
        # Local build tags (+cpu, +cu128) are the same release for compatibility purposes.
        if wanted and installed.split("+")[0] != wanted:
            raise ConfigError(
                f"{name} {installed} is installed but trainctl is pinned to {name}=={wanted}; "
                "use the project's image or `pip install -c requirements/constraints.txt .`"
            )
        versions.append(f"{name} {installed}")
    return ", ".join(versions)


def _pins() -> dict[str, str]:
    pins = {}
    for requirement in metadata.requires("trainctl") or []:
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*==\s*([^;\s]+)", requirement)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def joins_cluster(settings: TrainSettings) -> bool:
    """Whether `train` joins a running cluster (TRAIN_RAY_ADDRESS or RAY_ADDRESS), rather than
    starting its own."""
    return joined_address(settings) is not None


def local_cluster_check(settings: TrainSettings, found: Found) -> str:
    """`check` without a cluster to join: what the local cluster `train` starts will hold,
    judged as cluster_check judges a running one, without starting it (that alone took 40 s
    of `check`'s 45 on a laptop, to learn what this machine already says)."""
    from app.ray_cluster import capacity_problems, local_resources

    resources = local_resources(settings)
    if resources is None:  # this Ray resolves node resources differently: ask a real cluster
        return cluster_check(settings, found)
    missing = capacity_problems(settings, resources)
    problem = workers_problem(settings, found.info) if found.info else None
    if missing or problem:
        raise ConfigError(missing or [problem])
    cpus, machine = int(resources.get("CPU", 0)), usable_cpus()
    if cpus > machine.usable:
        workers = f"{counted(settings.workers.max, 'worker')} x {settings.cpus_per_worker:g} CPU"
        held = (
            f"{cpus} CPU slots ({workers} + {DATA_CPUS} for reading data) on {machine.describe()}"
        )
    else:
        held = f"{cpus} CPUs ({machine.describe()})"
    said = (
        f"local, started by `trainctl {'tune' if settings.tune_space else 'train'}`, not by "
        f"check: {held}, "
        f"{resources.get('GPU', 0):g} GPUs (Ray {_ray_version()})"
    )
    # The local head is this machine: its memory bounds the trials' drivers as a head's does.
    room = Room(resources, resources.get("memory"))
    return _with_trials(settings, found, room, said, oversubscribed(settings))


def _pool_cpus() -> float:
    """The connected cluster's data-pool CPUs: counted in its CPUs, never a worker's."""
    from app.data.pool import find_data_pool

    pool = find_data_pool()
    return pool.cpus if pool is not None else 0.0


def _ray_version() -> str:
    return metadata.version("ray")


def cluster_check(settings: TrainSettings, found: Found) -> str:
    """Join the cluster, wait for it to hold the workers (TRAIN_CAPACITY_WAIT_S at most), and
    judge rows per worker against them."""
    import ray

    connect_ray(settings)
    check_capacity(settings, _pool_cpus)
    # After capacity: a request the cluster can never hold is the first thing to fix.
    problem = workers_problem(settings, found.info) if found.info else None
    if problem:
        raise ConfigError(problem)
    resources = ray.cluster_resources()
    nodes = len([n for n in ray.nodes() if n.get("Alive")])
    said = (
        f"{nodes} node(s), {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs "
        f"(Ray {ray.__version__})"
    )
    return _with_trials(settings, found, connected_room() if found.trials_left else None, said)


def _with_trials(
    settings: TrainSettings,
    found: Found,
    room: Room | None,
    said: str,
    advice: str | None = None,
) -> str:
    """The cluster's verdict `said`, with how many of a sweep's trials train at once there as
    `trainctl tune` will count them; Advice where fewer can than TRAIN_TUNE_CONCURRENT asks
    (Tune queues the rest, and the sweep takes longer than planned) or where `advice` says."""
    said_all, problems = said, [advice] if advice else []
    if found.trials_left and room is not None:
        at_once = trials_at_once_in(settings, room, found.trials_left)
        said_all = (
            f"{said}; the sweep trains {counted(at_once.trials, 'trial')} at a time ({at_once.why})"
        )
        problems.extend(at_once.warnings)
    if problems:
        raise Advice(f"{said_all}; but {'; '.join(problems)}")
    return said_all
