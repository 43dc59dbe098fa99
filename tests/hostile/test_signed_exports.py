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
    make_run(storage, name, 0.9)
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
