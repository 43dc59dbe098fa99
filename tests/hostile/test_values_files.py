"""Hostile values reaching `trainctl render` the ways Helm users pass them: -f files, --set,
--set-string, --set-json, a target folder with planted links or bad files, and names Kubernetes
would refuse. Each is refused with exit 2 naming what is wrong, fast, with nothing half-written,
or read exactly as Helm reads it. No Ray, no cluster.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.k8s.values import set_path
from tests.contract.k8s_support import EXAMPLES, HelmFailed, helm_template
from tests.hostile.support import assert_refused, files_under, trainctl
from tests.support import REPO

POOL = "nodePools:\n  cpu: {gpusPerWorker: 0}\nnetworkPolicy: {enabled: false}\n"


def _file(tmp_path: Path, text: str, name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _objects(result_out: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(result_out) if doc]


def _config(tmp_path: Path, text: str, *args: str) -> dict[str, str]:
    result = trainctl("render", "-f", str(_file(tmp_path, POOL + text)), *args)
    assert result.code == 0, result.text
    (config,) = [o for o in _objects(result.out) if o["kind"] == "ConfigMap"]
    return config["data"]


# -- -f files -----------------------------------------------------------------------------------


def test_short_f_is_repeatable_and_later_files_win(tmp_path: Path) -> None:
    first = _file(tmp_path, POOL + "train: {epochs: 3, seed: 1}\n", "a.yaml")
    second = _file(tmp_path, "train: {epochs: 4}\n", "b.yaml")
    result = trainctl("render", "-f", str(first), "-f", str(second))
    assert result.code == 0, result.text
    (config,) = [o for o in _objects(result.out) if o["kind"] == "ConfigMap"]
    assert (config["data"]["TRAIN_EPOCHS"], config["data"]["TRAIN_SEED"]) == ("4", "1")
    assert result.out.startswith("---\n# Source: trainctl/")


def test_missing_values_file_is_exit_2_naming_it(tmp_path: Path) -> None:
    assert_refused(trainctl("render", "-f", str(tmp_path / "nope.yaml")), 2, "nope.yaml")


def test_endless_device_is_refused_not_read_forever() -> None:
    started = time.monotonic()
    assert_refused(trainctl("render", "-f", "/dev/zero"), 2, "/dev/zero", "MiB")
    assert time.monotonic() - started < 2


def test_not_utf8_is_exit_2_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"labels: {team: \xe9quipe}\n")
    assert_refused(trainctl("render", "-f", str(path)), 2, "latin1.yaml", "UTF-8")


# -- YAML as Helm reads it ------------------------------------------------------------------------


def test_exponent_numbers_are_numbers_as_in_helm(tmp_path: Path) -> None:
    data = _config(tmp_path, "train: {lr: 3e-4, epochs: 1e3, weight_decay: 1E-2}\n")
    assert (data["TRAIN_LR"], data["TRAIN_EPOCHS"], data["TRAIN_WEIGHT_DECAY"]) == (
        "0.0003",
        "1000",
        "0.01",
    )


def test_an_integer_too_large_for_64_bits_is_said_as_what_it_became(tmp_path: Path) -> None:
    """YAML reads an integer beyond 64 bits as a float, as Helm does: the refusal said
    TRAIN_EPOCHS='1e+42' could not be parsed as an integer, of a number written as one (a
    red-team pass). It says why the value reads so, and the setting's bounds; Helm refuses it."""
    path = _file(tmp_path, POOL + "train: {epochs: " + "1" + "0" * 42 + "}\n")
    assert_refused(
        trainctl("render", "-f", str(path)), 2,
        "train.epochs: TRAIN_EPOCHS='1e+42'",
        "1e+42 is how Helm writes a whole number this large (it holds numbers in 64 bits); "
        "allowed: minimum 1, maximum 100000",
    )  # fmt: skip
    with pytest.raises(HelmFailed):
        helm_template([path])
    # A fraction in float notation is a plain setting's refusal, without that note.
    path = _file(tmp_path, POOL + "train: {epochs: 1.0e-5}\n")
    result = trainctl("render", "-f", str(path))
    assert_refused(result, 2, "TRAIN_EPOCHS='1e-05'")
    assert "how Helm writes" not in result.text


def test_dates_stay_strings_and_y_n_are_booleans_as_in_helm(tmp_path: Path) -> None:
    text = "runAnnotations: {x.io/day: 2024-05-01, x.io/at: 2024-05-01T10:00:00Z}\n"
    text += "train: {tensorboard: y}\nrayAuth: {enabled: n}\n"
    result = trainctl("render", "-f", str(_file(tmp_path, POOL + text)))
    assert result.code == 0, result.text
    objects = _objects(result.out)
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    assert job["metadata"]["annotations"]["x.io/day"] == "2024-05-01"
    assert job["metadata"]["annotations"]["x.io/at"] == "2024-05-01T10:00:00Z"
    assert not [o for o in objects if o["kind"] == "Secret"]  # rayAuth.enabled: n is false
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config["data"]["TRAIN_TENSORBOARD"] == "true"


def _rendered_by_both(path: Path) -> tuple[Any, dict, dict, dict]:
    """`render -f path` (its result, RayJob and ConfigMap) and Helm's ConfigMap of the file."""
    result = trainctl("render", "-f", str(path))
    assert result.code == 0, result.text
    objects = _objects(result.out)
    helm = helm_template([path], release="trainctl", namespace="default")
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (helm_config,) = [o for o in helm if o["kind"] == "ConfigMap"]
    return result, job, config, helm_config


def test_leading_zeros_and_word_boolean_keys_are_read_as_in_helm_and_said_with_their_line(
    tmp_path: Path,
) -> None:
    """`epochs: 010` is 8 to Helm (octal) and a `yes:` key is the key "true": read so here too,
    and render says so on stderr, naming the file and line; quoted, neither is said. Where such
    a reading is refused (a `train:` key "true"), the note stands beside the refusal."""
    text = POOL + 'train: {epochs: 010, lr: 0.01}\nrunAnnotations:\n  yes: "0042"\n'
    path = _file(tmp_path, text)
    result, job, config, helm_config = _rendered_by_both(path)
    assert config["data"]["TRAIN_EPOCHS"] == helm_config["data"]["TRAIN_EPOCHS"] == "8"
    assert job["metadata"]["annotations"]["true"] == "0042"
    assert result.err.splitlines()[:2] == [
        f"trainctl: WARNING: values file {path}, line 4: 010 is read as the octal number 8 (a "
        'leading 0 means octal to Helm); write 10 to mean 10, or "010" for the text',
        f"trainctl: WARNING: values file {path}, line 6: the key yes is read as the boolean true, "
        'so it becomes the key "true" (YAML 1.1, as Helm reads it); write "yes" to keep the word',
    ]
    quoted = _file(tmp_path, POOL + 'train: {epochs: 10}\nrunAnnotations: {"yes": "0042"}\n')
    said = trainctl("render", "-f", str(quoted))
    assert said.code == 0 and "WARNING" not in said.err, said.text
    refused = _file(tmp_path, POOL + "train: {on: x}\n")
    assert_refused(
        trainctl("render", "-f", str(refused)), 2, "train: Additional properties are not allowed",
        f"  - which may explain it: values file {refused}, line 4: the key on is read as the "
        "boolean true",
    )  # fmt: skip


def test_a_second_document_is_dropped_as_in_helm_and_said_with_its_line(tmp_path: Path) -> None:
    """`---` and a second document below it (two files pasted into one) were dropped without
    a word, as Helm drops them (a red-team pass); an empty one after a last `---` is no news."""
    path = _file(tmp_path, POOL + "train: {epochs: 3}\n---\ntrain: {epochs: 5}\n")
    result, _, config, helm_config = _rendered_by_both(path)
    assert config["data"]["TRAIN_EPOCHS"] == helm_config["data"]["TRAIN_EPOCHS"] == "3"
    assert result.err.splitlines()[0] == (
        f"trainctl: WARNING: values file {path}, line 5: a second YAML document starts here "
        "(after ---), and nothing in it is read: Helm reads a values file's first document "
        "only; merge it into the first, or give it as a file of its own (-f)"
    )
    ended = _file(tmp_path, "---\n" + POOL + "---\n")
    said = trainctl("render", "-f", str(ended))
    assert said.code == 0 and "WARNING" not in said.err, said.text


def test_a_key_given_twice_is_read_as_in_helm_and_said_with_both_lines(tmp_path: Path) -> None:
    """A red-team pass: `train: {epochs: 3}` and, below it, `train: {lr: 0.1}` (a merge
    conflict's leftover) rendered without a word, and the run trained the default 10 epochs.
    Helm keeps the last one too; render says which line's was dropped."""
    text = POOL + "train: {epochs: 3}\ntrain: {lr: 0.1}\nrunAnnotations: {a: x, c: w, a: z}\n"
    path = _file(tmp_path, text)
    result, job, config, helm_config = _rendered_by_both(path)
    assert "TRAIN_EPOCHS" not in config["data"] and "TRAIN_EPOCHS" not in helm_config["data"]
    assert config["data"]["TRAIN_LR"] == helm_config["data"]["TRAIN_LR"] == "0.1"
    assert job["metadata"]["annotations"]["a"] == "z"
    assert result.err.splitlines()[:2] == [
        f"trainctl: WARNING: values file {path}, line 5: the key train is given twice in one "
        "mapping (first on line 4); the last one wins, as in Helm, so the first is dropped",
        f"trainctl: WARNING: values file {path}, line 6: the key a is given twice in one "
        "mapping (first on line 6); the last one wins, as in Helm, so the first is dropped",
    ]


def test_infinity_is_refused_as_helm_refuses_it(tmp_path: Path) -> None:
    path = _file(tmp_path, POOL + "train: {lr: .inf}\n")
    assert_refused(trainctl("render", "-f", str(path)), 2, str(path), ".inf")
    with pytest.raises(HelmFailed):
        helm_template([path])


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    path = _file(tmp_path, _bomb())
    started = time.monotonic()
    result = trainctl("render", "-f", str(path))
    assert time.monotonic() - started < 2
    assert_refused(result, 2, str(path), "excessive aliasing")
    with pytest.raises(HelmFailed, match="excessive aliasing"):
        helm_template([path])


def test_self_referencing_anchor_and_deep_nesting_are_refused(tmp_path: Path) -> None:
    assert_refused(trainctl("render", "-f", str(_file(tmp_path, "a: &a [*a]\n"))), 2, "itself")
    deep = _file(tmp_path, "a: " + "[" * 20000 + "]" * 20000 + "\n", "deep.yaml")
    assert_refused(trainctl("render", "-f", str(deep)), 2, "deep.yaml")


def test_python_tags_construct_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = f"x: !!python/object/apply:os.system ['touch {marker}']\n"
    text += "y: !!python/name:os.system\n"
    result = trainctl("render", "-f", str(_file(tmp_path, text)))
    assert_refused(result, 2, "x", "y")  # unknown keys, read as plain data
    assert not marker.exists()


# -- --set, --set-string, --set-json --------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "expression"),
    [
        ("--set", "train.epochs"),
        ("--set", "train.epochs=5,x"),
        ("--set", "nodePools[x]=1"),
        ("--set", "labels={a,b"),
        ("--set", "nodePools.cpu.tolerations[99999999].key=a"),
        ("--set", "nodePools.cpu.tolerations[-1].key=a"),
        ("--set", "a." + ".".join(["b"] * 31) + "=1"),
        ("--set-json", "train.lr=[1"),
        ("--set-json", "train.lr=NaN"),
        ("--set-string", "labels"),
        # Nested past Python's recursion limit: a clear refusal, not an internal error.
        ("--set-json", "train=" + "[" * 30_000 + "]" * 30_000),
        ("--set", "a" + "[0]" * 20_000 + "=1"),
        # Numbers Go's JSON reader refuses (out of float64's range, cut short) and Python's
        # would read as inf or as a shorter number.
        ("--set-json", "train.lr=1e400"),
        ("--set-json", 'rayJob.runtimeEnv={"env_vars":{"A":1e400}}'),
        ("--set-json", "train.lr=1."),
        # An argument that was not UTF-8 (Python holds byte 0xff as U+DCFF).
        ("--set", "labels.team=\udcff"),
        ("--set-string", "runAnnotations.x\udcff=1"),
        ("--set-json", 'labels.team="\udcff"'),
    ],
)
def test_malformed_set_is_exit_2_naming_it(tmp_path: Path, option: str, expression: str) -> None:
    path = _file(tmp_path, POOL)
    out = tmp_path / "out"
    result = trainctl("render", "-f", str(path), option, expression, "--out", str(out))
    assert_refused(result, 2, option, repr(expression)[1:-1][:30])
    assert files_under(out) == []


@pytest.mark.parametrize("option", ["--set", "--set-json"])
def test_a_number_where_a_mapping_belongs_says_a_mapping_is_wanted(
    tmp_path: Path, option: str
) -> None:
    """Said "write 0.1 unquoted; give it with --set-json", which failed again in the same
    words (found by a red-team pass): a sweep's distribution is a mapping."""
    sweep = EXAMPLES / "values-nightly-sweep.yaml"
    result = trainctl("render", "-f", str(sweep), option, "tune.space.lr=0.1")
    assert_refused(result, 2, "tune.space.lr: 0.1 is not a mapping, and one is wanted")
    assert "loguniform" in result.err and "unquoted" not in result.err


@pytest.mark.parametrize("option", ["--set", "--set-json"])
def test_a_fraction_where_a_count_belongs_says_a_whole_number_is_wanted(option: str) -> None:
    """`--set dataPool.minReplicas=1.5` was told to give it with --set-json, which then failed
    on its type (a red-team pass): no spelling of 1.5 is a count."""
    pool = EXAMPLES / "values-data-pool.yaml"
    result = trainctl("render", "-f", str(pool), option, "dataPool.minReplicas=1.5")
    assert result.code == 2, result.text
    assert "dataPool.minReplicas" in result.err and "--set-json" not in result.err, result.err
    assert "whole number" in result.err or "integer" in result.err, result.err


def test_submit_refuses_a_malformed_set_before_reaching_a_cluster(tmp_path: Path) -> None:
    path = _file(tmp_path, POOL)
    result = trainctl("submit", "-f", str(path), "--set", "train.epochs", "--pool", "cpu")
    assert_refused(result, 2, "--set", "train.epochs", "has no value")
    result = trainctl("submit", "-f", str(path), "--set-json", "train.lr=[", "--pool", "cpu")
    assert_refused(result, 2, "--set-json")


# -- --set-file: regular files only, bounded, never a hang ---------------------------------------


def _set_file(tmp_path: Path, target: str) -> object:
    path = _file(tmp_path, POOL)
    expression = f"runAnnotations.x\\.io/notes={target}"
    return trainctl(
        "render", "-f", str(path), "--set-file", expression, "--out", str(tmp_path / "o"),
        "--with-secret",
    )  # fmt: skip


def test_set_file_puts_a_files_text_where_helm_puts_it(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("line one\nline two: ünï\n", encoding="utf-8")
    result = _set_file(tmp_path, str(notes))
    assert result.code == 0, result.text
    job = yaml.safe_load((tmp_path / "o" / "cpu" / "rayjob.yaml").read_text(encoding="utf-8"))
    assert job["metadata"]["annotations"]["x.io/notes"] == "line one\nline two: ünï\n"
    expression = f"runAnnotations.x\\.io/notes={notes}"
    (helm,) = [o for o in helm_template([_file(tmp_path, POOL)], set_file=(expression,))
               if o["kind"] == "RayJob"]  # fmt: skip
    assert helm["metadata"]["annotations"]["x.io/notes"] == "line one\nline two: ünï\n"


def test_set_file_refuses_a_link_a_fifo_a_device_a_folder_and_huge_or_binary_files(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key=abc\n")
    (tmp_path / "link").symlink_to(secret)  # planted in a repository: would copy the secret
    os.mkfifo(tmp_path / "fifo")  # nobody writes: opening it for reading would wait forever
    (tmp_path / "huge").write_bytes(b"a" * (2**20 + 1))
    (tmp_path / "binary").write_bytes(b"\x89PNG\r\n\x1a\n\xff")
    cases = [
        ("link", "symbolic link"),
        ("fifo", "not a regular file"),
        ("/dev/zero", "not a regular file"),
        (str(tmp_path), "not a regular file"),
        ("huge", "larger than 1 MiB"),
        ("binary", "not UTF-8"),
        ("absent", "No such file"),
    ]
    for target, words in cases:
        target = target if target.startswith("/") else str(tmp_path / target)
        started = time.monotonic()
        result = _set_file(tmp_path, target)
        assert time.monotonic() - started < 30  # ends (a FIFO read would block forever)
        assert_refused(result, 2, "--set-file", target, words)
        assert "aws_secret" not in result.text
        assert files_under(tmp_path / "o") == []


def test_submit_refuses_a_bad_set_file_before_reaching_a_cluster(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    path = _file(tmp_path, POOL)
    args = ("--set-file", f"rayJob.entrypoint={tmp_path / 'fifo'}", "--pool", "cpu")
    assert_refused(trainctl("submit", "-f", str(path), *args), 2, "--set-file", "fifo")


def test_set_types_values_as_helm_does(tmp_path: Path) -> None:
    data = _config(tmp_path, "", "--set", "train.epochs=5,train.tensorboard=TRUE")
    assert (data["TRAIN_EPOCHS"], data["TRAIN_TENSORBOARD"]) == ("5", "true")
    # Helm's --set keeps 0.002 a string (it only infers integers): use --set-json for floats.
    path = _file(tmp_path, POOL)
    refused = trainctl("render", "-f", str(path), "--set", "train.lr=0.002")
    assert_refused(refused, 2, "train.lr", "give it with --set-json train.lr=0.002")
    assert _config(tmp_path, "", "--set-json", "train.lr=0.002")["TRAIN_LR"] == "0.002"
    assert_refused(
        trainctl("render", "-f", str(path), "--set-string", "train.epochs=5"), 2, "train.epochs"
    )


def test_set_escapes_and_null_delete_a_default(tmp_path: Path) -> None:
    args = ("--set", r"runAnnotations.x\.io/team=a\,b", "--set", "poolDefaults.tolerations=null")
    result = trainctl("render", "-f", str(_file(tmp_path, POOL)), *args)
    assert result.code == 0, result.text
    (job,) = [o for o in _objects(result.out) if o["kind"] == "RayJob"]
    assert job["metadata"]["annotations"]["x.io/team"] == "a,b"
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert "tolerations" not in worker


# -- render --out: whole or nothing, never through a link -----------------------------------------


def _render_out(tmp_path: Path, out: Path, text: str = "") -> object:
    """`render --out` with the chart's generated token Secret written too (secret.yaml)."""
    path = _file(tmp_path, POOL + text)
    return trainctl("render", "-f", str(path), "--out", str(out), "--with-secret")


def test_planted_symlink_pool_folder_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "cpu").symlink_to(victim)
    assert_refused(_render_out(tmp_path, out), 2, str(out / "cpu"), "link")
    assert files_under(victim) == []


def test_symlinked_out_folder_and_secret_file_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert_refused(_render_out(tmp_path, link), 2, "link")
    assert files_under(real) == []
    out = tmp_path / "out"
    (out / "cpu").mkdir(parents=True)
    secret = tmp_path / "elsewhere.yaml"
    secret.write_text("kind: Secret\n")
    (out / "cpu" / "secret.yaml").symlink_to(secret)
    assert_refused(_render_out(tmp_path, out), 2, "secret.yaml", "link")
    assert secret.read_text() == "kind: Secret\n"


@pytest.mark.parametrize("planted", ["data: [unclosed\n", _bomb()], ids=["broken", "bomb"])
def test_bad_file_in_the_target_leaves_everything_as_it_was(tmp_path: Path, planted: str) -> None:
    out = tmp_path / "out"
    assert _render_out(tmp_path, out).code == 0
    before = {p: (out / p).read_bytes() for p in files_under(out) if (out / p).is_file()}
    (out / "cpu" / "secret.yaml").write_text(planted)
    before[os.path.join("cpu", "secret.yaml")] = planted.encode()
    result = _render_out(tmp_path, out, "train: {epochs: 9}\n")
    assert_refused(result, 2, "secret.yaml")
    after = {p: (out / p).read_bytes() for p in files_under(out) if (out / p).is_file()}
    assert after == before
    assert [p.name for p in tmp_path.iterdir() if "staging" in p.name] == []


def test_bad_values_leave_an_existing_target_untouched(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _render_out(tmp_path, out).code == 0
    before = {p: (out / p).read_bytes() for p in files_under(out) if (out / p).is_file()}
    assert_refused(_render_out(tmp_path, out, "train: {epochs: 0}\n"), 2, "train.epochs")
    after = {p: (out / p).read_bytes() for p in files_under(out) if (out / p).is_file()}
    assert after == before


def _token(path: Path) -> str:
    return yaml.safe_load(path.read_text())["data"]["auth_token"]


def test_every_pool_folder_keeps_the_one_token_the_clusters_share(tmp_path: Path) -> None:
    """A pool added to an --out folder got a new token for the Secret every pool's cluster
    reads, so applying it broke the running pools' worker restarts (found by a red-team pass).
    The token of any earlier pool folder is every pool's; folders that disagree are refused."""
    out = tmp_path / "out"
    assert _render_out(tmp_path, out).code == 0
    first = _token(out / "cpu" / "secret.yaml")
    two = "nodePools:\n  cpu: {gpusPerWorker: 0}\n  gpu: {gpusPerWorker: 0}\n"
    two += "networkPolicy: {enabled: false}\n"
    added = trainctl("render", "-f", str(_file(tmp_path, two, "two.yaml")), "--out", str(out),
                     "--with-secret")  # fmt: skip
    assert added.code == 0, added.text
    assert _token(out / "gpu" / "secret.yaml") == _token(out / "cpu" / "secret.yaml") == first
    # The cpu pool retired (its folder is left, never deleted) and another added: still one.
    later = "nodePools:\n  cpu: {enabled: false}\n  tpu: {gpusPerWorker: 0}\n"
    later += "networkPolicy: {enabled: false}\n"
    result = trainctl("render", "-f", str(_file(tmp_path, later, "later.yaml")), "--out",
                      str(out), "--with-secret")  # fmt: skip
    assert result.code == 0, result.text
    assert _token(out / "tpu" / "secret.yaml") == first

    secret = out / "gpu" / "secret.yaml"
    secret.write_text(secret.read_text().replace(first, "b3RoZXI="))
    before = {p: (out / p).read_bytes() for p in files_under(out) if (out / p).is_file()}
    refused = _render_out(tmp_path, out)
    assert_refused(refused, 2, "the pool folders hold different tokens for the one Secret",
                   str(secret), "kubectl get secret")  # fmt: skip
    assert {p: (out / p).read_bytes() for p in files_under(out) if (out / p).is_file()} == before


def test_pool_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cpu").write_text("not a folder")
    assert_refused(_render_out(tmp_path, out), 2, str(out / "cpu"))
    assert (out / "cpu").read_text() == "not a folder"


# -- names Kubernetes refuses, refused by both engines --------------------------------------------

BAD_NAMES = {
    "secretEnv.0.secretName": "secretEnv: [{name: TOKEN, secretName: Bad_Name, key: t}]\n",
    "secretEnv.0.secretName ": "secretEnv: [{name: TOKEN, secretName: a..b, key: t}]\n",
    "secretEnv.0.key": "secretEnv: [{name: TOKEN, secretName: s, key: a/b}]\n",
    "secretEnv.0.key ": f"secretEnv: [{{name: TOKEN, secretName: s, key: {'k' * 254}}}]\n",
    "rayAuth.existingSecret": "rayAuth: {enabled: true, existingSecret: 'has space'}\n",
    "scheduler.queue": f"scheduler: {{name: kueue, queue: {'q' * 64}}}\n",
    "scheduler.queue ": "scheduler: {name: volcano, queue: Team_A}\n",  # a Queue object's name
    "scheduler.priorityClass": "scheduler: {name: kueue, queue: q, priorityClass: 'a b'}\n",
    "schedule.cron": "schedule: {enabled: true, cron: '60 * * * *'}\n",
    "schedule.cron ": "schedule: {enabled: true, cron: '0 24 * * *'}\n",
    "schedule.cron  ": "schedule: {enabled: true, cron: '0 3 * 13 *'}\n",
    "schedule.cron   ": "schedule: {enabled: true, cron: '0 3 * * 8'}\n",
    "schedule.cron    ": 'schedule: {enabled: true, cron: "0\\u00a03 * * 0"}\n',
    "schedule.timeZone": "schedule: {enabled: true, timeZone: Mars/Olympus_Mons}\n",
    # robfig/cron (the CronJob controller's parser): weekdays 0-6, ranges run upwards.
    "schedule.cron     ": "schedule: {enabled: true, cron: '0 3 * * 7'}\n",
    "schedule.cron      ": "schedule: {enabled: true, cron: '30-10 * * * *'}\n",
    "schedule.cron       ": "schedule: {enabled: true, cron: '0 0 * * fri-mon'}\n",
    "secretEnv.0.key  ": "secretEnv: [{name: TOKEN, secretName: s, key: '..'}]\n",
    "secretEnv.0.key   ": "secretEnv: [{name: TOKEN, secretName: s, key: ..x}]\n",
    "runAnnotations ": "runAnnotations: {" + ".".join(["abcdefghij"] * 24) + "/x: v}\n",
    "runAnnotations": "runAnnotations: {" + ", ".join(f"x.io/a{i}: v" for i in range(33)) + "}\n",
    "runAnnotations.x.io/big": f"runAnnotations: {{x.io/big: {'v' * 1901}}}\n",
}


@pytest.mark.parametrize("where", sorted(BAD_NAMES))
def test_names_kubernetes_refuses_are_refused_by_both_engines(tmp_path: Path, where: str) -> None:
    path = _file(tmp_path, POOL + BAD_NAMES[where])
    assert_refused(trainctl("render", "-f", str(path)), 2, where.strip())
    with pytest.raises(HelmFailed):
        helm_template([path])


def test_good_names_cron_and_zone_render_in_both(tmp_path: Path) -> None:
    text = (
        "schedule: {enabled: true, cron: '*/15 2-4,05-09 1,15 jan-MAR/2 mon-fri,sun', "
        "timeZone: Europe/Paris}\nsecretEnv: [{name: TOKEN, secretName: a.b-c, key: .x_Y-1}]\n"
    )
    path = _file(tmp_path, POOL + text)
    assert trainctl("render", "-f", str(path)).code == 0
    assert helm_template([path])


def test_a_number_or_boolean_where_text_is_wanted_says_both_fixes(tmp_path: Path) -> None:
    """It said `True is not of type 'string'` (Python's spelling) and only --set-string, to a
    user whose value came from a file."""
    result = trainctl("render", "-f", str(_file(tmp_path, POOL + "labels: {build: true}\n")))
    assert_refused(
        result, 2, 'labels.build: true is a boolean, and text is wanted: in a values file quote '
        'it ("true", or the word you wrote: YAML reads yes, no, on and off unquoted as booleans '
        'too); --set reads true as a boolean too', "--set-string labels.build=true",
    )  # fmt: skip
    assert "True" not in result.text


def test_the_set_string_fix_is_one_set_string_takes(tmp_path: Path) -> None:
    """For a key with dots (a node label) it said `--set-string ...cloud.google.com/gke-spot=true`,
    which --set reads as nested keys: the suggested fix failed again (found by a red-team
    pass). It names the key as --set takes it, and that command renders."""
    text = "nodePools:\n  cpu: {nodeSelector: {cloud.google.com/gke-spot: true}}\n"
    refused = trainctl("render", "-f", str(_file(tmp_path, text)))
    fix = r"nodePools.cpu.nodeSelector.cloud\.google\.com/gke-spot=true"
    assert_refused(refused, 2, f"give it with --set-string {fix}")
    fixed = trainctl("render", "-f", str(_file(tmp_path, POOL, "pool.yaml")), "--set-string", fix)
    assert fixed.code == 0, fixed.text
    (job,) = [o for o in _objects(fixed.out) if o["kind"] == "RayJob"]
    (worker,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert worker["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert set_path(["a", 0, "b.c", "x,y=z[1]"]) == r"a[0].b\.c.x\,y\=z\[1\]"


@pytest.mark.parametrize(
    ("text", "says", "not_said"),
    [
        # `off` is a documented TRAIN_AMP value, and false to YAML 1.1: the settings' "Input
        # should be 'auto', 'off', ..." read as a contradiction, and never said to quote it.
        (
            "train: {amp: off}\n",
            "train.amp: TRAIN_AMP='false': Input should be 'auto', 'off', 'bf16' or 'fp16'; "
            "false is a boolean here: YAML reads yes, no, on and off unquoted as booleans, so "
            "quote the word you meant",
            "password",
        ),
        # A number in env: two refusals more, of credentials it could not hold.
        (
            "env: {NCCL_DEBUG_LEVEL: 1}\n",
            "env.NCCL_DEBUG_LEVEL: 1 is a number, and text is "
            'wanted: in a values file quote it ("1")',
            "password",
        ),
        # Text where a number is wanted, from a file: --set was not how it came.
        (
            "train: {lr: '0.001'}\n",
            "train.lr: '0.001' is not of type 'number': in a values "
            "file write 0.001 unquoted; --set keeps it a string too",
            "TRAIN_LR",
        ),
    ],
)
def test_a_mistyped_value_is_named_once_for_its_type(
    tmp_path: Path, text: str, says: str, not_said: str
) -> None:
    """Found by a platform team's pass: each of these said something beside the point."""
    result = trainctl("render", "-f", str(_file(tmp_path, POOL + text)))
    assert_refused(result, 2, says)
    assert not_said not in result.text, result.text
    assert result.text.count("\n  - ") == 1, result.text  # one problem, one line


def test_a_long_name_and_a_quoted_boolean_say_what_is_allowed(tmp_path: Path) -> None:
    """`is too long` gave no limit, `'yes' is not of type 'boolean'` no fix (found by a
    red-team pass)."""
    long = "p" * 30
    text = f"nodePools:\n  {long}: {{gpusPerWorker: 0}}\n"
    said = f"nodePools: the name {long!r} is 30 characters, over the 24 allowed"
    assert_refused(trainctl("render", "-f", str(_file(tmp_path, text))), 2, said)
    quoted = 'nodePools:\n  cpu: {gpusPerWorker: 0, spot: "yes"}\n'
    assert_refused(trainctl("render", "-f", str(_file(tmp_path, quoted, "q.yaml"))), 2,
                   "nodePools.cpu.spot: 'yes' is text, and true or false is wanted: write it "
                   "unquoted")  # fmt: skip


@pytest.mark.parametrize(
    ("assignment", "said"),
    [
        ("dataPool.cpusPerWorker=0", "dataPool.cpusPerWorker: 0 is not allowed: it must be "
                                     "greater than 0 (CPUs of a Ray pod"),
        ("dataPool.replicas=5000", "dataPool.replicas: 5000 is not allowed: it must be at most "
                                   "1000"),
        ("dataPool.maxReplicas=null", "dataPool.maxReplicas: null (an empty value) is not "
                                      "allowed here: an integer is wanted"),
        ("nodePools.L4_big.gpusPerWorker=1", "nodePools: 'L4_big' is not allowed: a pool name: "
                                             "lowercase letters, digits and '-'"),
        ("dataPool.autoscaling=yes", "dataPool.autoscaling: 'yes' is text, and true or false "
                                     "is wanted"),
    ],
)  # fmt: skip
def test_bounds_nulls_and_pool_names_say_what_is_allowed_in_one_line(
    assignment: str, said: str
) -> None:
    """`0 is less than or equal to the minimum of 0`, `None is not of type 'integer'` (Python's
    spelling), a raw regex for a pool name, and for `autoscaling=yes` a first line saying to
    set it to true, beside the real problem (found by a red-team pass)."""
    values = str(REPO / "examples" / "values-data-pool.yaml")
    result = trainctl("render", "-f", values, "--set", assignment)
    assert_refused(result, 2, said)
    assert result.text.count("\n  - ") == 1, result.text
    for raw in ("None", "minimum of", "does not match", "set dataPool.autoscaling to true"):
        assert raw not in result.text, result.text


def test_a_private_key_given_as_a_setting_is_refused_without_being_shown(tmp_path: Path) -> None:
    """A red-team pass: the refusal quoted the whole key, into the CI log."""
    key = tmp_path / "key.pem"
    key.write_text(
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
    )
    values = _file(tmp_path, POOL)
    result = trainctl("render", "-f", str(values), "--set-file", f"train.model_name={key}")
    assert_refused(result, 2, "train.model_name: TRAIN_MODEL_NAME='***\\n': must be 1-64")
    assert "PRIVATE KEY" not in result.text and "MIIE" not in result.text


def test_a_tab_is_said_in_one_line_with_its_place(tmp_path: Path) -> None:
    """A red-team pass: PyYAML's message spans lines, and the one-line refusal showed them as
    literal \\n sequences."""
    path = _file(tmp_path, "nodePools:\n  a:\n\tgpusPerWorker: 0\n")
    result = trainctl("render", "-f", str(path))
    assert_refused(
        result, 2, f"values file {path} is not valid YAML: line 3, column 1: found character "
        "'\\t' that cannot start any token (while scanning for the next token); YAML indents "
        "with spaces, never tabs",
    )  # fmt: skip
    assert "\\n" not in result.err
