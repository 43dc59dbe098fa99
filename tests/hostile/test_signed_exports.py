"""Signed model cards (app/export/signature.py): a writer of the storage who rewrites an export
and every checksum that vouches for it (the card, summary.json's card_sha256, the champion
pointer) is refused by a reader holding the public key. Real Ed25519 keys, real exports."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from PIL import Image

from app.errors import ConfigError
from app.export.card import CARD_FILE, card_json
from app.export.signature import SIGNATURE_FILE, configuration
from app.promotion import pointer_signature
from app.promotion.step import promote_run
from app.run.warm_start import resolve
from tests.hostile.support import assert_refused, trainctl
from tests.promotion_support import INFO, make_run, settings_for


def _pem(key: object, folder: Path, name: str) -> Path:
    private = folder / f"{name}.pem"
    private.write_bytes(
        key.private_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = folder / f"{name}.pub.pem"
    public.write_bytes(
        key.public_key().public_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "keys").mkdir()
    private = _pem(ed25519.Ed25519PrivateKey.generate(), tmp_path / "keys", "team")
    return private, private.with_name("team.pub.pem")


@pytest.fixture
def image(tmp_path: Path) -> str:
    path = tmp_path / "seven.png"
    Image.fromarray(np.full((8, 8), 200, dtype=np.uint8), "L").save(path)
    return str(path)


def _promoted(storage: Path, name: str, signing: Path | None) -> Path:
    make_run(storage, name, 0.9, witness_key=signing)
    extra = {"signing_key": str(signing)} if signing else {}
    promote_run(settings_for(storage, name, **extra), INFO, {"status": "succeeded"})
    return storage / name


def _forge(run: Path) -> None:
    """What the red-team pass did: weights that always answer 7, the card re-hashed over them,
    and summary.json's card_sha256 rewritten, all from the storage alone."""
    export = run / "export"
    state = torch.load(export / "weights.pt", weights_only=True)
    bias = next(k for k in state if k.endswith("bias") and state[k].shape == (10,))
    state[bias] = torch.full((10,), -100.0)
    state[bias][7] = 100.0
    torch.save(state, export / "weights.pt")
    card = json.loads((export / CARD_FILE).read_text())
    card["files"]["weights.pt"] = hashlib.sha256((export / "weights.pt").read_bytes()).hexdigest()
    (export / CARD_FILE).write_bytes(card_json(card))
    summary = json.loads((run / "summary.json").read_text())
    summary["promotion"]["export"]["card_sha256"] = hashlib.sha256(card_json(card)).hexdigest()
    (run / "summary.json").write_text(json.dumps(summary))


def test_a_forged_export_passes_every_checksum_but_not_the_signature(
    tmp_path: Path, keys: tuple[Path, Path], image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    private, public = keys
    run = _promoted(tmp_path / "runs", "r", private)
    card = json.loads((run / "export" / CARD_FILE).read_text())
    assert card["signed_by"]["algorithm"] == "ed25519"
    pointer = json.loads((tmp_path / "runs" / "champions" / "digits-cnn.json").read_text())
    copy = Path(pointer["export"])
    assert (copy / SIGNATURE_FILE).read_bytes() == (run / "export" / SIGNATURE_FILE).read_bytes()
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "runs"))
    honest = trainctl("predict", str(run), image, "--json")
    assert honest.code == 0, honest.text
    assert trainctl("predict", "champion:digits-cnn", image).code == 0

    _forge(run)
    monkeypatch.delenv("TRAIN_VERIFY_KEY")
    assert trainctl("predict", str(run), image).code == 0  # checksums alone: it loads
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    forged = trainctl("predict", str(run), image)
    assert_refused(forged, 2, f"{run / 'export' / SIGNATURE_FILE}", "does not verify",
                   "the card was altered, or signed by another key; not loaded")  # fmt: skip
    refused = trainctl("evaluate", str(run), "--split", "valid")
    assert_refused(refused, 2, "does not verify")

    # The champion's copy and its pointer, forged together: the pointer names the new card.
    forged_copy = (
        copy.parent / hashlib.sha256((run / "export" / CARD_FILE).read_bytes()).hexdigest()
    )
    shutil.copytree(run / "export", forged_copy)
    pointer["card_sha256"] = forged_copy.name
    (tmp_path / "runs" / "champions" / "digits-cnn.json").write_text(json.dumps(pointer))
    assert_refused(trainctl("predict", "champion:digits-cnn", image), 2, "does not verify")


def test_an_unsigned_export_and_unsigned_warm_starts_are_refused(
    tmp_path: Path, keys: tuple[Path, Path], image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, public = keys
    run = _promoted(tmp_path / "runs", "r", None)
    assert not (run / "export" / SIGNATURE_FILE).exists()
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, f"no {SIGNATURE_FILE}: the export is not signed", "TRAIN_SIGNING_KEY")
    # A signed export whose signature was deleted reads the same: nothing tells them apart.
    assert "or its signature was removed since" in result.text
    checkpoint = next(run.glob("checkpoint_epoch_*"))
    for source in (str(checkpoint), str(checkpoint / "model.pt"), str(run)):
        settings = settings_for(tmp_path / "runs", "next", warm_start=source)
        with pytest.raises(ConfigError, match="is not signed, and TRAIN_VERIFY_KEY is set"):
            resolve(settings, INFO)
    with pytest.raises(ConfigError, match=f"no {SIGNATURE_FILE}"):
        resolve(settings_for(tmp_path / "runs", "next", warm_start=str(run / "export")), INFO)


def test_signed_warm_starts_load(
    tmp_path: Path, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    private, public = keys
    run = _promoted(tmp_path / "runs", "r", private)
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    for source in (str(run / "export"), "champion:digits-cnn"):
        warm = resolve(settings_for(tmp_path / "runs", "next", warm_start=source), INFO)
        assert warm.load_weights()


def test_check_names_keys_that_cannot_sign_or_are_not_a_pair(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    private, public = keys
    assert configuration(None, None).startswith("off")
    assert configuration(private, None).startswith("exports signed with key ")
    assert configuration(private, public).startswith("exports signed and verified with key ")
    other = _pem(ed25519.Ed25519PrivateKey.generate(), tmp_path / "keys", "other")
    cases = {
        (None, public): "is set without TRAIN_SIGNING_KEY",
        (other, public): "are not a pair",
        (_pem(ec.generate_private_key(ec.SECP256R1()), tmp_path / "keys", "ec"), None): (
            "not an Ed25519 key"
        ),
        (public, None): "not an unencrypted PEM private key",
        (None, private): "not a PEM public key",
        (tmp_path / "keys" / "missing.pem", None): "no such file",
    }
    for (signing, verify), needle in cases.items():
        with pytest.raises(ConfigError, match=needle):
            configuration(signing, verify)


def test_a_fifo_or_a_file_of_two_keys_is_refused_not_waited_on_or_half_read(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """A FIFO named as the key waited for a writer forever; an old and a new public key put in
    one file (a rotation) verified with the first alone (a red-team pass)."""
    import os

    private, public = keys
    fifo = tmp_path / "keys" / "fifo.pem"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        configuration(fifo, None)
    other = _pem(ed25519.Ed25519PrivateKey.generate(), tmp_path / "keys", "other")
    both = tmp_path / "keys" / "both.pub.pem"
    both.write_bytes(public.read_bytes() + other.with_name("other.pub.pem").read_bytes())
    with pytest.raises(ConfigError, match="holds 2 PEM blocks; it takes one key"):
        configuration(private, both)


def test_the_champion_comparison_holds_the_champion_to_the_key(
    tmp_path: Path, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted unsigned champion with a high figure kept every signed run out for good, and
    `check` said `ok` (found by a red-team pass): the figures a run must beat are now a signed
    card's, and a champion that does not verify is kept, said, and checked by `check`."""
    from app.promotion.check import promotion_check

    private, public = keys
    storage = tmp_path / "runs"
    _promoted(storage, "planted", None)  # unsigned: what a writer of the storage can make
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    make_run(storage, "honest", 0.95, witness_key=private)
    settings = settings_for(storage, "honest", signing_key=str(private))
    summary = promote_run(settings, INFO, {"status": "succeeded"})
    assert summary["promoted"] is False
    reason = summary["promotion"]["reason"]
    assert "the champion cannot be checked against its model card" in reason, reason
    assert "carries no promotion_signature" in reason and "remove the pointer" in reason, reason
    with pytest.raises(ConfigError, match="cannot be checked against its model card"):
        promotion_check(settings, INFO)
    # Its pointer signed as a promotion (by the key's holder), its card still unsigned.
    pointer_file = storage / "champions" / "digits-cnn.json"
    pointer = json.loads(pointer_file.read_text())
    pointer_file.write_text(
        json.dumps(pointer_signature.signed(pointer, "digits-cnn", _key(private)))
    )
    summary = promote_run(settings, INFO, {"status": "succeeded"})
    reason = summary["promotion"]["reason"]
    assert summary["promoted"] is False and f"no {SIGNATURE_FILE}" in reason, reason


def _key(private: Path) -> ed25519.Ed25519PrivateKey:
    from app.export.signature import private_key

    return private_key(private)


def test_a_champion_pointer_is_followed_only_as_a_signed_promotion_wrote_it(
    tmp_path: Path, keys: tuple[Path, Path], image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run signs its card, promoted or not: a writer of the storage copied the signed
    export of a run the gate refused into champions/ and pointed the pointer at it, and
    predict champion: and warm starts loaded it with TRAIN_VERIFY_KEY set (a red-team pass).
    The promotion signs the pointer's name, version and card; readers follow no other."""
    private, public = keys
    storage = tmp_path / "runs"
    _promoted(storage, "champ", private)
    make_run(storage, "refused", 0.95, witness_key=private)
    refused = settings_for(
        storage, "refused", signing_key=str(private), promote_if="val_accuracy>=0.99"
    )
    assert promote_run(refused, INFO, {"status": "succeeded"})["promoted"] is False
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(storage))
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    assert trainctl("predict", "champion:digits-cnn", image).code == 0  # the promoted one

    pointer_file = storage / "champions" / "digits-cnn.json"
    honest = json.loads(pointer_file.read_text())
    card = (storage / "refused" / "export" / CARD_FILE).read_bytes()
    digest = hashlib.sha256(card).hexdigest()
    shutil.copytree(storage / "refused" / "export", storage / "champions" / "digits-cnn" / digest)
    # Every field the card also says, as the card says it: only the signature tells.
    figures = json.loads(card)["checkpoint"]["metrics"]
    planted = {**honest, "card_sha256": digest, "run_name": "refused", "version": 2}
    planted.update(metrics=figures, value=figures[honest["metric"]])
    for pointer, needle in [
        (planted, "its promotion_signature does not verify against TRAIN_VERIFY_KEY"),
        ({k: v for k, v in planted.items() if k != "promotion_signature"}, "carries no promo"),
        ({**honest, "version": 7}, "does not verify"),  # a signed pointer renumbered
    ]:
        pointer_file.write_text(json.dumps(pointer))
        assert_refused(trainctl("predict", "champion:digits-cnn", image), 2, needle)
        with pytest.raises(ConfigError, match=needle):
            resolve(settings_for(storage, "next", warm_start="champion:digits-cnn"), INFO)
    pointer_file.write_text(json.dumps(honest))  # put back whole: followed (a rollback is)
    assert trainctl("predict", "champion:digits-cnn", image).code == 0


def test_a_signed_export_in_another_runs_folder_is_refused(
    tmp_path: Path, keys: tuple[Path, Path], image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run a's signed export copied over run b's, and b's summary.json pointed at it: it
    verified, and predict answered with a's model as b (found by a red-team pass)."""
    private, public = keys
    a = _promoted(tmp_path / "runs", "a", private)
    b = _promoted(tmp_path / "runs", "b", private)
    shutil.rmtree(b / "export")
    shutil.copytree(a / "export", b / "export")
    summary = json.loads((b / "summary.json").read_text())
    card_sha = hashlib.sha256((b / "export" / CARD_FILE).read_bytes()).hexdigest()
    summary["promotion"]["export"]["card_sha256"] = card_sha
    (b / "summary.json").write_text(json.dumps(summary))
    assert trainctl("predict", str(b), image).code == 0  # no key: a card proves no origin
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    result = trainctl("predict", str(b), image)
    assert_refused(result, 2, "a signed card of run a, in the folder of run b")
    # Without b's summary.json (and classes.json) it is still b's folder: refused alike.
    (b / "summary.json").unlink()
    (b / "classes.json").unlink(missing_ok=True)
    result = trainctl("predict", str(b), image)
    assert_refused(result, 2, "a signed card of run a, in the folder of run b")
    assert_refused(trainctl("evaluate", str(b), str(tmp_path)), 2, "in the folder of run b")
    # An export kept on its own, in a folder named export/ that is no run's: it loads.
    kept = tmp_path / "models" / "export"
    shutil.copytree(a / "export", kept)
    assert trainctl("predict", str(kept), image).code == 0


def test_an_export_planted_at_the_top_of_a_run_folder_is_refused(
    tmp_path: Path, keys: tuple[Path, Path], image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run a's signed export files copied to the top of run b's folder, not into export/:
    predict took the folder for an export of its own and answered with a's model as b, and a
    warm start from b verified them; every check that holds a run's export to its run looks
    at export/ only (a red-team pass). Without a key, a card there with its class names
    reversed relabelled every prediction."""
    private, public = keys
    a = _promoted(tmp_path / "runs", "a", private)
    b = _promoted(tmp_path / "runs", "b", private)
    for planted in (a / "export").iterdir():
        shutil.copy(planted, b / planted.name)
    said = ("a run folder with a model_card.json at its top", "put there by hand",
            "not loaded")  # fmt: skip
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "runs"))
    for verify in (str(public), None):
        if verify:
            monkeypatch.setenv("TRAIN_VERIFY_KEY", verify)
        else:
            monkeypatch.delenv("TRAIN_VERIFY_KEY")
        assert_refused(trainctl("predict", str(b), image), 2, *said)
        monkeypatch.setenv("TRAIN_WARM_START", str(b))
        assert_refused(trainctl("check", "--skip-cluster"), 2, "FAIL  warm_start", *said)
        monkeypatch.delenv("TRAIN_WARM_START")
    # Without the run's other records the folder is still b's: its export/ tells.
    for record in b.iterdir():
        if record.is_file() and record.name not in {p.name for p in (a / "export").iterdir()}:
            record.unlink()
    assert_refused(trainctl("predict", str(b), image), 2, *said)
    # b's own export, named directly, still loads; so does an export folder kept on its own.
    assert trainctl("predict", str(b / "export"), image).code == 0
    kept = tmp_path / "models" / "a-model"
    shutil.copytree(a / "export", kept)
    assert trainctl("predict", str(kept), image).code == 0


@pytest.mark.parametrize(
    ("signature", "needle"),
    [
        ("[" * 3000, "nested"),  # was a RecursionError: an internal error, exit 1
        (json.dumps({"signature": "AAAA", "key_id": "\x1b]0;pwned\x07"}), "\\x1b]0;pwned"),
        (json.dumps({"signature": "AAAA"}), "does not verify"),
        # It said `unreadable signature ('signature')`, a KeyError's bare text (a red-team pass).
        ("{}", "unreadable signature (no `signature` text in it)"),
        (json.dumps({"signature": 5}), "unreadable signature (no `signature` text in it)"),
        ("[1]", "unreadable signature (no `signature` text in it)"),
    ],
)
def test_a_hostile_signature_file_is_refused_and_never_drives_the_terminal(
    tmp_path: Path,
    keys: tuple[Path, Path],
    image: str,
    monkeypatch: pytest.MonkeyPatch,
    signature: str,
    needle: str,
) -> None:
    private, public = keys
    run = _promoted(tmp_path / "runs", "r", private)
    (run / "export" / SIGNATURE_FILE).write_text(signature)
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, needle)
    assert "\x1b" not in result.text and "key None" not in result.text


def test_a_key_file_named_through_a_link_is_read(
    tmp_path: Path, keys: tuple[Path, Path], image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Kubernetes Secret volume's files are links: the operator names the key, no writer of
    the storage does, so a link to it is followed (storage files never are)."""
    private, public = keys
    run = _promoted(tmp_path / "runs", "r", private)
    linked = tmp_path / "verify.pem"
    linked.symlink_to(public)
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(linked))
    assert trainctl("predict", str(run), image).code == 0
    assert configuration(private, linked).startswith("exports signed and verified")


def test_a_sweeps_best_trial_is_signed_under_the_sweeps_name_and_loads(
    tmp_path: Path, keys: tuple[Path, Path], image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The best trial's export is promoted, and signed, as the sweep (its card's run_name)."""
    private, public = keys
    run = _promoted(tmp_path / "runs", "nightly", private)
    sweep = tmp_path / "sweeps" / "nightly"
    (sweep / "trials").mkdir(parents=True)
    shutil.copytree(run, sweep / "trials" / "trial-0002")
    (sweep / "sweep.json").write_text(json.dumps({"best": {"trial": "trial-0002"}}))
    monkeypatch.setenv("TRAIN_VERIFY_KEY", str(public))
    result = trainctl("predict", str(sweep), image)
    assert result.code == 0, result.text
    elsewhere = tmp_path / "runs" / "copy"
    shutil.copytree(run, elsewhere)
    assert_refused(trainctl("predict", str(elsewhere), image), 2, "in the folder of run copy")
