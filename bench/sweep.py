"""Sweep: `trainctl tune` against the same trials run one after another with `trainctl train`.

Both sides run the real, unmodified CLI on digits with the cnn, one CPU worker per trial,
TRAIN_TUNE_SCHEDULER=random (every trial trains to the end, so both sides do the same work):
the sweep trains TRAIN_TUNE_CONCURRENT trials at a time on one local Ray cluster it starts
once; the sequential side starts `trainctl train` once per trial (its own local Ray each time)
with the values the sweep drew (read from the sweep's sweep.json). Each rep does both, in
alternating order. Usage:
    python -m bench.sweep [--trials 4] [--epochs 2] [--concurrent 2] [--reps 1] [--smoke]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import interleave, medians, ratio, ray_bench_arguments, result_line, say

SETTINGS = {"dataset": "digits", "model": "cnn", "num_workers": "1", "global_batch_size": "64"}
SPACE = "lr: {loguniform: [0.001, 0.01]}\nweight_decay: {uniform: [0.0, 0.05]}\n"


def _env(work: Path, epochs: int, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAIN_", "MLFLOW_"))}
    env.pop("RAY_ADDRESS", None)  # each side starts its own local cluster
    values = {**SETTINGS, "epochs": str(epochs), "data_path": str(work / "data"), **more}
    env.update({f"TRAIN_{k.upper()}": v for k, v in values.items()})
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    return env


def _trainctl(command: str, env: dict[str, str], work: Path, log: Path) -> float:
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.call(
            [sys.executable, "-m", "app", command], env=env, cwd=work, stdout=out, stderr=out
        )
    took = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"trainctl {command} exited {code}:\n{log.read_text()[-3000:]}")
    return took


def draw_trials(work: Path, trials: int, epochs: int) -> list[dict[str, object]]:
    """The trials `trainctl tune` draws for these settings (the same code, the same seed)."""
    import yaml

    from app.settings import TrainSettings
    from app.settings.tune_plan import draw
    from app.settings.tune_space import parse_space

    base = TrainSettings.model_validate({**SETTINGS, "epochs": epochs})
    space = parse_space(yaml.safe_load(SPACE), base)
    return [t.values for t in draw(space, trials, base.seed, "random")]


def sweep_once(work: Path, rep: int, trials: int, epochs: int, concurrent: int) -> dict[str, float]:
    storage = work / f"sweep-{rep}"
    env = _env(
        work, epochs, storage_path=str(storage), run_name="sweep",
        tune_space=str(work / "space.yaml"), tune_samples=str(trials),
        tune_concurrent=str(concurrent), tune_scheduler="random",
    )  # fmt: skip
    took = _trainctl("tune", env, work, work / f"sweep-{rep}.log")
    record = json.loads((storage / "sweep" / "sweep.json").read_text())
    assert [row["values"] for row in record["trials"]] == json.loads(
        (work / "drawn.json").read_text()
    ), "the sweep trained other trials than the sequential side"
    return {"wall_s": took, "trials": float(len(record["trials"]))}


def sequential_once(work: Path, rep: int, epochs: int) -> dict[str, float]:
    drawn = json.loads((work / "drawn.json").read_text())
    started = time.monotonic()
    for number, values in enumerate(drawn, 1):
        env = _env(
            work, epochs, storage_path=str(work / f"seq-{rep}"), run_name=f"trial-{number}",
            **{key: str(value) for key, value in values.items()},
        )  # fmt: skip
        _trainctl("train", env, work, work / f"seq-{rep}-{number}.log")
    return {"wall_s": time.monotonic() - started, "trials": float(len(drawn))}


def main() -> None:
    parser = ray_bench_arguments(
        __doc__, "2 trials of 1 epoch, 2 at a time", trials=4, epochs=2, concurrent=2, reps=1
    )
    args = parser.parse_args()
    if args.smoke:
        args.trials, args.epochs, args.concurrent, args.reps = 2, 1, 2, 1
    work = Path(tempfile.mkdtemp(prefix="trainctl-bench-sweep-"))
    try:
        (work / "space.yaml").write_text(SPACE)
        from app.data.kinds import prepare_dataset

        prepare_dataset("digits", work / "data" / "digits")  # neither side pays for it
        drawn = draw_trials(work, args.trials, args.epochs)
        (work / "drawn.json").write_text(json.dumps(drawn))
        say(f"sweep: {args.trials} trials x {args.epochs} epochs, {args.concurrent} at a time")
        results = interleave(
            {
                "sweep": lambda: sweep_once(
                    work, len(list(work.glob("sweep-*.log"))), args.trials, args.epochs,
                    args.concurrent,
                ),
                "sequential": lambda: sequential_once(
                    work, len(list(work.glob("seq-*-1.log"))), args.epochs
                ),
            },
            args.reps,
            say=say,
        )  # fmt: skip
        figures = medians(results)
        # The ratio is taken of the seconds as recorded, so that a reader recomputing it from
        # them gets the same figure (from the unrounded ones its third decimal could differ).
        sweep_s = round(figures["sweep"]["wall_s"], 2)
        sequential_s = round(figures["sequential"]["wall_s"], 2)
        say(f"sweep {sweep_s:.1f} s, one after another {sequential_s:.1f} s")
        print(
            result_line(
                "sweep",
                {
                    "trials": args.trials,
                    "epochs": args.epochs,
                    "concurrent": args.concurrent,
                    "reps": args.reps,
                    "sweep_s": sweep_s,
                    "sequential_s": sequential_s,
                    "sequential_over_sweep": ratio(sequential_s, sweep_s),
                },
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
