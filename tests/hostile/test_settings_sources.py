"""Hostile and careless settings, from the environment and from ./.env, held to one set of rules.

Each case runs the real CLI in-process (`trainctl check --skip-cluster`, which reads settings
exactly as `train` does) and expects exit 2, a message naming the variable (and for .env the
file and line), no traceback, and no file written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.support import assert_refused, files_under, trainctl
from tests.support import REPO

BIG = str(2**64)
# (variable, value, text the message must contain)
ENV_CASES = [
    ("TRAIN_SEED", BIG, "TRAIN_SEED"),
    ("TRAIN_SEED", str(2**200), "TRAIN_SEED"),
    ("TRAIN_SEED", "-1", "TRAIN_SEED"),
    ("TRAIN_SEED", "1e3", "TRAIN_SEED"),
    ("TRAIN_SEED", "0x10", "TRAIN_SEED"),
    ("TRAIN_RUN_NAME", "run\n", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "run\r\n", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "\nrun", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "../escape", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "a/b", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "/abs", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", ".", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "..", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "x" * 64, "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "ünïcode", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "run name", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "-lead", "TRAIN_RUN_NAME"),
    ("TRAIN_RUN_NAME", "$(reboot)", "TRAIN_RUN_NAME"),
    ("TRAIN_EPOCHS", "1e9", "TRAIN_EPOCHS"),
    ("TRAIN_EPOCHS", "100001", "TRAIN_EPOCHS"),
    ("TRAIN_EPOCHS", "nan", "TRAIN_EPOCHS"),
    ("TRAIN_LR", "nan", "TRAIN_LR"),
    ("TRAIN_LR", "inf", "TRAIN_LR"),
    ("TRAIN_LR", "-inf", "TRAIN_LR"),
    ("TRAIN_WEIGHT_DECAY", "nan", "TRAIN_WEIGHT_DECAY"),
    ("TRAIN_CPUS_PER_WORKER", "inf", "TRAIN_CPUS_PER_WORKER"),
    # Below Ray's resource precision: refused only once the workers were placed, after Ray.
    ("TRAIN_CPUS_PER_WORKER", "1e-9", "greater than or equal to 0.0001"),
    ("TRAIN_NUM_WORKERS", "2-", "TRAIN_NUM_WORKERS"),
    ("TRAIN_NUM_WORKERS", "1-2-3", "TRAIN_NUM_WORKERS"),
    ("TRAIN_NUM_WORKERS", "٣", "TRAIN_NUM_WORKERS"),
    ("TRAIN_GLOBAL_BATCH_SIZE", str(2**70), "TRAIN_GLOBAL_BATCH_SIZE"),
    ("TRAIN_MODEL", "cnn\n", "TRAIN_MODEL"),
    ("TRAIN_DATASET", "digits; rm -rf /", "TRAIN_DATASET"),
    ("TRAIN_STORAGE_PATH", "~nosuchuser-xyz/runs", "~nosuchuser-xyz names no user"),
    ("TRAIN_DATA_PATH", "~nosuchuser-xyz/data", "~nosuchuser-xyz names no user"),
    ("TRAIN_RAY_CONNECT_TIMEOUT", "0", "TRAIN_RAY_CONNECT_TIMEOUT"),
    ("TRAIN_RAY_CONNECT_TIMEOUT", "nan", "TRAIN_RAY_CONNECT_TIMEOUT"),
    ("TRAIN_RAY_CONNECT_TIMEOUT", "1e9", "TRAIN_RAY_CONNECT_TIMEOUT"),
    # A newline in a location printed a line of its own in `check`, read as another verdict.
    ("TRAIN_STORAGE_PATH", "/tmp/runs\nok    gate: forged", "a location is one line"),
    ("TRAIN_STORAGE_PATH", "s3://bucket/ru\nns", "a location is one line"),
    ("TRAIN_DATA_PATH", "data\x1b[31m", "holds the control character '\\x1b'"),
    ("TRAIN_EPOCH", "1", "did you mean TRAIN_EPOCHS?"),
    ("train_epoch", "1", "is not a trainctl setting"),
]


@pytest.mark.parametrize(("name", "value", "needle"), ENV_CASES, ids=lambda v: repr(v)[:30])
def test_bad_env_setting_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(name, value)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, needle)
    assert files_under(tmp_path) == []


def test_a_64_bit_seed_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.settings.env import load_settings

    monkeypatch.setenv("TRAIN_SEED", str(2**64 - 1))
    assert load_settings().seed == 2**64 - 1


# (.env text or bytes, what the message must name)
DOTENV_CASES = [
    (
        "TRAIN_EPOCH=1\n",
        ".env:1: TRAIN_EPOCH is not a trainctl setting; did you mean TRAIN_EPOCHS?",
    ),
    ("TRAIN_MODEL=cnn\n\n\nTRAIN_EPOCH=1\n", ".env:4: TRAIN_EPOCH"),
    ("# comment\nTRAIN_MODLE=cnn\n", ".env:2: TRAIN_MODLE"),
    ("export TRAIN_EPOCH=1\n", ".env:1: TRAIN_EPOCH"),
    ("train_epoch=1\n", ".env:1: train_epoch"),
    ("this is not a setting\n", ".env:1: cannot parse"),
    ("TRAIN_MODEL=cnn\ngarbage line\n", ".env:2: cannot parse"),
    ("TRAIN_MODEL='cnn\n", ".env:1: cannot parse"),
    ('TRAIN_MODEL="cnn\n', ".env:1: cannot parse"),
    ("TRAIN_MODEL\n", ".env:1: TRAIN_MODEL has no value"),
    ("=cnn\n", ".env:1: cannot parse"),
    ("TRAIN MODEL=cnn\n", ".env:1: cannot parse"),
    # A value refused by its setting's rule: the file and line it came from, then the rule.
    ("TRAIN_EPOCHS=ten\n", ".env:1: TRAIN_EPOCHS='ten'"),
    ("# comment\n\nTRAIN_RUN_NAME='run\n'\n", ".env:3: TRAIN_RUN_NAME"),
    ("TRAIN_MODEL=cnn\nTRAIN_SEED=18446744073709551616\n", ".env:2: TRAIN_SEED"),
    (b"TRAIN_MODEL=\xff\xfe\n", ".env:1: not UTF-8"),
    (b"TRAIN_MODEL=cnn\nTRAIN_EPOCHS=\xe9\n", ".env:2: not UTF-8"),
    (b"\xff\xfeT\x00R\x00", ".env:1: not UTF-8"),
    # python-dotenv expands ${NAME}: an unset one became nothing, and the run trained on /d
    # (a red-team pass).
    ("TRAIN_DATA_PATH=${TRAINCTL_TEST_UNSET}/d\n", ".env:1: TRAIN_DATA_PATH uses ${TRAINCTL_TES"),
    ("TRAIN_EPOCHS=${NOPE_A}${NOPE_B}\n", "uses ${NOPE_A}, ${NOPE_B}, not set"),
]


@pytest.mark.parametrize(("content", "needle"), DOTENV_CASES, ids=lambda v: repr(v)[:30])
def test_bad_dotenv_is_refused_with_file_and_line(
    tmp_path: Path, content: str | bytes, needle: str
) -> None:
    path = tmp_path / ".env"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, needle)
    assert files_under(tmp_path) == [".env"]


def test_a_bad_value_the_environment_overrides_in_dotenv_is_named_as_the_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pydantic-settings reads the environment over ./.env: the value refused is the
    # environment's, so the message must not send the reader to the file.
    (tmp_path / ".env").write_text("TRAIN_EPOCHS=3\n")
    monkeypatch.setenv("TRAIN_EPOCHS", "ten")
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "TRAIN_EPOCHS='ten'")
    assert ".env" not in result.text, result.text


def test_dotenv_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".env").mkdir()
    assert_refused(trainctl("check", "--skip-cluster"), 2, ".env: is a folder")


def test_dotenv_references_to_what_is_set_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.settings.env import load_settings

    monkeypatch.setenv("TRAINCTL_TEST_EPOCHS", "4")
    (tmp_path / ".env").write_text(
        "ROOT=/srv\nTRAIN_EPOCHS=${TRAINCTL_TEST_EPOCHS}\nTRAIN_DATA_PATH=${ROOT}/data\n"
        "TRAIN_SEED=${TRAINCTL_TEST_UNSET:-7}\n"
    )
    settings = load_settings()
    assert (settings.epochs, str(settings.data_path), settings.seed) == (4, "/srv/data", 7)


def test_dotenv_keys_of_other_tools_and_good_lines_pass(tmp_path: Path) -> None:
    from app.settings.env import load_settings

    (tmp_path / ".env").write_text(
        "# tools share this file\nexport AWS_REGION=eu-west-1\nOTHER\nTRAIN_EPOCHS=3\n"
        "TRAIN_MODEL='cnn'  # inline comment\n"
    )
    settings = load_settings()
    assert (settings.epochs, settings.model) == (3, "cnn")


# prepare-data: every option refused before anything is written.
PREPARE_CASES = [
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**64)], "--seed"),
    (["--seed", "abc"], "--seed"),
    (["--out", "a-file"], "exists but is not a folder"),
    (["--out", "~nosuchuser-xyz/data"], "~nosuchuser-xyz names no user"),
    (["--out", "a-file/sub"], "cannot create the output folder"),
]


@pytest.mark.parametrize(("args", "needle"), PREPARE_CASES, ids=lambda v: repr(v)[:30])
def test_prepare_data_bad_options(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "a-file").write_text("x")
    argv = ["prepare-data", "--dataset", "synthetic", *args]
    if "--out" not in args:
        argv += ["--out", str(tmp_path / "out")]
    assert_refused(trainctl(*argv), 2, needle)
    assert files_under(tmp_path) == ["a-file"]


RENDER_CASES = [
    (["--out", "a-file"], "exists but is not a folder"),
    (["--out", "~nosuchuser-xyz/m"], "~nosuchuser-xyz names no user"),
    # `-f -` reads stdin: `--out -` made a folder named "-" (a red-team pass).
    (["--out", "-"], "--out -: --out names the folder render writes a folder per pool into"),
    (["--out", "m", "--release", "demo\n"], "release name"),
    (["--out", "m", "-n", "ml\n"], "namespace"),
    (["--out", "m", "-n", "../kube-system"], "namespace"),
    (["--out", "m", "--values", "latin1.yaml"], "not UTF-8"),
    (["--out", "m", "--values", "list.yaml"], "must hold a mapping"),
    (["--out", "m", "--values", "bad.yaml"], "not valid YAML"),
    (["--out", "m", "--values", "alias.yaml"], "not valid YAML"),
]


@pytest.mark.parametrize(("args", "needle"), RENDER_CASES, ids=lambda v: repr(v)[:30])
def test_render_bad_options_and_files(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "latin1.yaml").write_bytes(b"labels: {team: caf\xe9}\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "bad.yaml").write_text("labels: {a: [\n")
    (tmp_path / "alias.yaml").write_text("labels: *nowhere\n")
    before = files_under(tmp_path)
    assert_refused(trainctl("render", *args), 2, needle)
    assert files_under(tmp_path) == before


def test_render_into_a_pool_folder_of_an_earlier_render_is_refused(tmp_path: Path) -> None:
    """`--out m/a100` nested every pool inside the a100 folder, and the next `render --out m`
    then refused a100's foreign files (a red-team pass)."""
    values = str(REPO / "examples" / "values-three-pools.yaml")
    first = trainctl("render", "-f", values, "--out", str(tmp_path / "m"))
    assert first.code == 0, first.text
    before = files_under(tmp_path)
    result = trainctl("render", "-f", values, "--out", str(tmp_path / "m" / "a100"))
    assert_refused(result, 2, "is a pool's folder of an earlier render", str(tmp_path / "m"))
    assert files_under(tmp_path) == before


def test_every_problem_and_verdict_is_one_printed_line(tmp_path: Path) -> None:
    """A problem quotes what it found (a file's name, a setting): a newline there started a
    line that read as a problem or a verdict of its own, and an escape sequence recoloured
    the terminal. Both are printed escaped."""
    odd = "seven\n  - forged problem\x1b[31m"
    result = trainctl("logs", str(tmp_path / odd))
    assert_refused(result, 2)
    lines = result.text.splitlines()
    assert all(line.startswith(("trainctl:", "  - ")) for line in lines), lines
    assert not any(line.startswith("  - forged") for line in lines), lines
    assert "\x1b" not in result.text, result.text


def test_check_refuses_a_data_path_train_could_not_write_the_dataset_to(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`check` said a built-in dataset would be written under a file (TRAIN_DATA_PATH=/dev/null),
    and `train` then refused the same path (found by a red-team pass)."""
    (tmp_path / "a-file").write_text("not a folder\n")
    monkeypatch.setenv("TRAIN_DATASET", "digits")
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "a-file" / "data"))
    result = trainctl("check", "--skip-cluster")
    assert_refused(
        result, 2, f"TRAIN_DATA_PATH={tmp_path}/a-file/data/digits: cannot create the folder "
        f"({tmp_path}/a-file: exists but is not a folder)",
    )  # fmt: skip
    assert (tmp_path / "a-file").read_text() == "not a folder\n"


def test_check_makes_no_storage_folder_and_says_the_first_run_will(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`check` made TRAIN_STORAGE_PATH's folders while proving them writable: a mistyped path
    left a tree of empty folders on the volume (a red-team pass). Where a folder existing is
    in the way, its words are train's."""
    monkeypatch.setenv("TRAIN_DATASET", "digits")
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "data"))
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "typo" / "runs"))
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    said = f"ok    storage: {tmp_path}/typo/runs writable (made by the first run), "
    assert said in result.out, result.text
    assert sorted(p.name for p in tmp_path.iterdir()) == [], result.text
    (tmp_path / "runs").mkdir()  # there already: nothing to say of making it
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "runs"))
    result = trainctl("check", "--skip-cluster")
    assert f"ok    storage: {tmp_path}/runs writable, " in result.out, result.text
    assert list((tmp_path / "runs").iterdir()) == []
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "a-file" / "runs"))
    assert_refused(
        trainctl("check", "--skip-cluster"), 2, f"TRAIN_STORAGE_PATH={tmp_path}/a-file/runs: "
        f"cannot create the folder ({tmp_path}/a-file: exists but is not a folder)",
    )  # fmt: skip


def test_a_storage_path_that_fails_is_not_read_by_the_checks_after_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TRAIN_STORAGE_PATH a file: besides its FAIL, `check` warned that <file>/<run>/summary.json
    was damaged (no run could rewrite it) and said `ok promotion` for a champion pointer to
    be written below the file (a red-team pass)."""
    from app.data.kinds import prepare_dataset

    prepare_dataset("digits", tmp_path / "data" / "digits")
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("TRAIN_DATASET", "digits")
    monkeypatch.setenv("TRAIN_MODEL", "cnn")
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "data"))
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "a-file"))
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, f"FAIL  storage: TRAIN_STORAGE_PATH={tmp_path}/a-file: exists")
    assert "damaged" not in result.text and "a-file/champions" not in result.text, result.text
    assert "ok    promotion: not judged: the storage fails (above)" in result.out, result.text
    assert [line for line in result.out.splitlines() if line.startswith("FAIL")] == [
        f"FAIL  storage: TRAIN_STORAGE_PATH={tmp_path}/a-file: exists but is not a folder"
    ]


@pytest.mark.parametrize("variable", ["TRAIN_STORAGE_PATH", "TRAIN_DATA_PATH"])
def test_a_link_to_nothing_on_the_way_is_named_with_its_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    """A symbolic link whose target is gone (a volume not mounted yet) reads as missing, so
    `check` said the data would be written there, and creating the folder then failed with a
    bare "File exists" (found by a red-team pass)."""
    (tmp_path / "volume").symlink_to(tmp_path / "not-mounted")
    monkeypatch.setenv("TRAIN_DATASET", "digits")
    monkeypatch.setenv(variable, str(tmp_path / "volume" / "x"))
    result = trainctl("check", "--skip-cluster")
    assert_refused(
        result, 2, f"{variable}={tmp_path}/volume/x", "cannot create the folder "
        f"({tmp_path}/volume is a link to {tmp_path}/not-mounted, which does not exist)",
    )  # fmt: skip
    assert "File exists" not in result.text
    assert not (tmp_path / "not-mounted").exists()
