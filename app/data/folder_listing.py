"""What an image-folder dataset holds: train/<class>/* and valid/<class>/* (and, optionally,
a held-out test/<class>/*), listed and checked.

Listing reads names only (no image is opened), on a volume or in a bucket, within a deadline,
so that even 100,000 classes are judged in preflight before Ray starts. The rules:

- class names are the folder names under train/, in plain code-point order (Python's `sorted`,
  as torchvision's ImageFolder sorts them), and label i means class_names[i] for good; two
  folders whose names are one name in two Unicode normalisations (NFC and NFD `café`) are
  refused, naming both (app/data/class_meta.py);
- a class folder under train/ without any image is an error, and so is a class in valid/ that
  train/ lacks, a single class, or more than MAX_CLASSES; valid/ may lack classes;
- test/ is optional (OPTIONAL_SPLITS): where there is one it is listed and judged as valid/ is
  (classes train/ has, at least one image, the same link rules); it is never trained or
  selected on, only scored at the run's end and judged by the promotion gate;
- valid/ and test/ files that are byte for byte files of the same class and name in a split
  before them (train/, then valid/) are refused: copied over, they would judge the model on
  what it trained or was selected on;
- image files are recognised by extension (torchvision's IMG_EXTENSIONS); other files, names
  starting with "." and files directly in train/ or valid/ are skipped and counted, since
  datasets carry README files, .DS_Store and labels files that are not a problem;
- on a volume a symbolic link leading out of the data folder is refused, and so is any link
  to a folder (it could loop or count images twice); a link to a file inside the folder is
  read as its target, which the workers open without following links (app/storage/safe_fs.py).
- an image file whose name is not UTF-8 (a volume's bytes from a Latin-1 or Windows tool) is
  refused, naming it: the run's records, Parquet and CSV hold names as UTF-8 text, and the
  write would fail after the work was done; a split that is a file, not a folder, is refused.
Names are shown escaped (repr) when they hold newlines or other unprintable characters, so a
file name can never forge a line of a message or a log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.data.image_decode import MAX_FILE_BYTES
from app.data.schema import KEPT_APART, OPTIONAL_SPLITS, SPLITS, Problems
from app.errors import ConfigError
from app.formatting import shown
from app.runfolder.class_names import MAX_CLASSES, names_problem
from app.storage.deadline import DeadlineExceeded
from app.storage.location import RunPath
from app.storage.reading import sha256_of
from app.storage.tree import walk

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MAX_FILES = 2_000_000  # every file becomes a row the driver holds in memory; prepare beyond
LIST_LIMIT_S = 300.0  # listing a bucket of MAX_FILES objects takes about two minutes
MAX_PROBLEMS = 12
COMPARED = 200  # valid/ or test/ files compared with a file of the same name before them
LAYOUT_HELP = "a folder dataset holds train/<class>/<image> and valid/<class>/<image>"
NOT_UTF8 = "trainctl records file names as UTF-8 text (Parquet, JSON, logs): rename them"


@dataclass(frozen=True)
class FolderListing:
    """Image files as (path relative to the data folder, label); links already resolved."""

    class_names: tuple[str, ...]
    train: tuple[tuple[str, int], ...]
    valid: tuple[tuple[str, int], ...]
    skipped: int  # files that are not images by their name
    test: tuple[tuple[str, int], ...] = ()  # the optional held-out split; () where absent
    has_test: bool = False
    # Of `skipped`, those in each split: an evaluation of one split counts its own.
    skipped_in: dict[str, int] = field(default_factory=dict)

    def note(self) -> str:
        if not self.skipped:
            return ""
        return (
            f"{self.skipped} files skipped (not {'/'.join(e[1:] for e in IMAGE_EXTENSIONS)}, "
            "hidden, or not inside a class folder)"
        )


def list_folder(root: RunPath, limit_s: float = LIST_LIMIT_S) -> FolderListing:
    """The dataset's classes and image files, or ConfigError with one line per problem."""
    problems = Problems()
    started = time.monotonic()  # one limit for both splits
    found: dict[str, tuple[dict[str, list[str]], int]] = {}
    for split in SPLITS + OPTIONAL_SPLITS:
        try:
            found[split] = _split(root, split, limit_s, problems, _add, started)
        except DeadlineExceeded:
            raise ConfigError(
                f"{root}: listing {split}/ took over {limit_s:g} s; for data this large write "
                "the Parquet layout once with `trainctl prepare-data --from-folder` and train "
                "with TRAIN_DATASET=parquet"
            ) from None
        except _Missing as missing:
            if missing.is_file:
                problems.add(f"{root / split}: is a file, not a folder; {LAYOUT_HELP}")
            elif split not in OPTIONAL_SPLITS:
                problems.add(f"{root / split}: folder not found; {LAYOUT_HELP}")
    if problems and root.name in SPLITS and len(set(found) & set(SPLITS)) < len(SPLITS):
        # The likeliest slip: the train/ (or valid/) folder given instead of the one above it.
        problems.add(f"{root} is itself a split folder: did you mean {root.parent}?")
    elif problems and not set(found) & set(SPLITS) and (flat := _flat_classes(root, limit_s)):
        # The layout most image sets are downloaded in: the classes, with no split.
        problems.add(
            f"{root} holds class folders with images directly ({flat}): put them in train/ "
            "and move a share of each class's images (one in five, say) into valid/<class>/; "
            "trainctl does not split them itself, so that the validation images stay the same "
            "from run to run"
        )
    if problems:
        raise ConfigError(problems)
    train, train_skipped = found["train"]
    valid, valid_skipped = found["valid"]
    test, test_skipped = found.get("test", ({}, 0))
    names = tuple(sorted(train))
    _judge(root, names, train, valid, problems)
    if not problems:
        _not_a_copy(root, "valid", valid, {"train": train}, problems, started, limit_s)
    if "test" in found:
        _judge_held_out(root / "test", names, test, problems)
        if not problems:
            others = {"train": train, "valid": valid}
            _not_a_copy(root, "test", test, others, problems, started, limit_s)
    if problems:
        raise ConfigError(problems)
    label = {name: index for index, name in enumerate(names)}

    def rows(split: dict[str, list[str]]) -> tuple[tuple[str, int], ...]:
        return tuple((path, label[name]) for name in sorted(split) for path in sorted(split[name]))

    return FolderListing(
        class_names=names,
        train=tuple((path, label[name]) for name in names for path in sorted(train[name])),
        valid=rows(valid),
        skipped=train_skipped + valid_skipped + test_skipped,
        test=rows(test),
        has_test="test" in found,
        skipped_in={"train": train_skipped, "valid": valid_skipped, "test": test_skipped},
    )


def _only_train_classes(
    folder: RunPath, names: tuple[str, ...], split: dict[str, list[str]], problems: Problems
) -> None:
    """valid/ and test/ may only hold classes that train/ has."""
    unknown = sorted(set(split) - set(names))
    if unknown:
        listed = ", ".join(shown(n) for n in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        problems.add(
            f"{folder}: {len(unknown)} class(es) not in train/: {listed}; {folder.name}/ may only "
            "hold classes that train/ has"
        )


def _judge_held_out(
    folder: RunPath, names: tuple[str, ...], split: dict[str, list[str]], problems: Problems
) -> None:
    """test/ by valid/'s rules: only classes train/ has, and at least one image."""
    _only_train_classes(folder, names, split, problems)
    total = sum(map(len, split.values()))
    if total > MAX_FILES:
        problems.add(f"{folder}: {total:,} image files, over the {MAX_FILES:,} a split may hold")
    if not any(split.values()):
        problems.add(
            f"{folder}: no image files; the optional test split needs at least one, or remove "
            "the folder"
        )


def _not_a_copy(
    root: RunPath,
    name: str,
    split: dict[str, list[str]],
    others: dict[str, dict[str, list[str]]],
    problems: Problems,
    started: float,
    limit_s: float,
) -> None:
    """valid/ is judged on as data the model did not train on, test/ as data it neither
    trained nor was selected on: a problem where their files are byte for byte those of a
    split before them (`cp -r valid test`). Files that share a class and file name with one
    there are compared, the first COMPARED of them (in name order) within what is left of the
    listing's time; a split whose copies were renamed is not told apart, and distinct files
    that share a name (0001.png in every split) pass."""
    below = {other: _by_name(files) for other, files in others.items()}
    pairs = [
        (path, other, below[other][file])
        for file, path in sorted(_by_name(split).items())
        for other in ("valid", "train")
        if other in below and file in below[other]
    ][:COMPARED]
    same: dict[str, list[str]] = {}
    for path, other, twin in pairs:
        if time.monotonic() - started > limit_s:
            break
        try:
            if sha256_of(root / path, root, MAX_FILE_BYTES) == sha256_of(
                root / twin, root, MAX_FILE_BYTES
            ):
                same.setdefault(other, []).append(path.split("/", 1)[-1])
        except (OSError, ValueError):  # unreadable here: decoding it says why, later
            continue
    remedy = "the test/ folder" if name == "test" else "put other images in valid/"
    for other, files in same.items():
        listed = ", ".join(shown(n) for n in files[:3]) + (" ..." if len(files) > 3 else "")
        problems.add(
            f"{root / name}: {len(files)} of its files {'is' if len(files) == 1 else 'are'} "
            f"byte for byte {other}/'s ({listed}); "
            f"{KEPT_APART[name]}: remove them, or {remedy}"
        )


def _by_name(classes: dict[str, list[str]]) -> dict[str, str]:
    """<class>/<file> below the split -> the file's path relative to the data folder."""
    return {path.split("/", 1)[-1]: path for paths in classes.values() for path in paths}


def _judge(
    root: RunPath,
    names: tuple[str, ...],
    train: dict[str, list[str]],
    valid: dict[str, list[str]],
    problems: Problems,
) -> None:
    allowed = ", ".join(IMAGE_EXTENSIONS)
    if len(names) > MAX_CLASSES:
        problems.add(
            f"{root / 'train'}: {len(names):,} class folders; at most {MAX_CLASSES:,} classes "
            "(the model's output layer has one unit per class)"
        )
        return
    if len(names) < 2:
        listed = f" (only {shown(names[0])})" if names else ""
        problems.add(
            f"{root / 'train'}: {len(names)} class folder(s){listed}; a classifier needs at "
            f"least 2 classes; {LAYOUT_HELP}"
        )
    twice = names_problem(names)
    if twice:
        problems.add(f"{root / 'train'}: {twice}")
    for name in names:
        if not name.isprintable():
            problems.add(
                f"{root / 'train'}: class folder {shown(name)} has unprintable characters; class "
                "names are recorded with the run and shown in messages: rename the folder"
            )
        if not train[name]:
            problems.add(
                f"{root / 'train' / shown(name)}: no image files; every class folder in train/ "
                f"needs at least one ({allowed}), or remove the folder"
            )
    _only_train_classes(root / "valid", names, valid, problems)
    total = sum(map(len, train.values())) + sum(map(len, valid.values()))
    if total > MAX_FILES:
        problems.add(
            f"{root}: {total:,} image files, over the {MAX_FILES:,} a folder dataset may hold; "
            "write them as Parquet with `trainctl prepare-data --from-folder`"
        )
    if not any(valid.values()):
        problems.add(f"{root / 'valid'}: no image files; the valid split needs at least one")


class _Missing(Exception):
    """The split's folder is not there (`is_file`: a file is there instead)."""

    def __init__(self, is_file: bool = False) -> None:
        super().__init__()
        self.is_file = is_file


def is_utf8(name: str) -> bool:
    """False for a volume's file name whose bytes are not UTF-8 (Python holds the bad bytes
    as lone surrogates, which no UTF-8 writer accepts); a bucket's keys are always UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")


def _class_of(parts: tuple[str, ...]) -> str | None:
    """The class of file `parts` (below the split): its folder; None when it is skipped."""
    if len(parts) < 2 or any(p.startswith(".") for p in parts) or not _is_image(parts[-1]):
        return None
    return parts[0]


def _any_image(parts: tuple[str, ...]) -> str | None:
    """An image file at any depth, under the key "" (images to classify, no classes)."""
    if any(p.startswith(".") for p in parts) or not _is_image(parts[-1]):
        return None
    return ""


# Adds file (parts, path relative to the folder walked) to its class; False when skipped.
_Adder = Callable[[dict[str, list[Any]], tuple[str, ...], str], bool]


def _add(classes: dict[str, list[Any]], parts: tuple[str, ...], relative: str) -> bool:
    """A dataset's split: each file as the path it is read at (a link's target's)."""
    name = _class_of(parts)
    if name is not None:
        classes.setdefault(name, []).append(relative)
    return name is not None


def _as_listed(class_of: Callable[[tuple[str, ...]], str | None]) -> _Adder:
    """Each file as (its path as listed, the path it is read at: a link's target's)."""

    def add(classes: dict[str, list[Any]], parts: tuple[str, ...], relative: str) -> bool:
        name = class_of(parts)
        if name is None:
            return False
        listed = "/".join(parts)
        if not is_utf8(listed):  # shown as the file it reads (whose name was checked)
            listed = relative
        classes.setdefault(name, []).append((listed, relative))
        return True

    return add


@dataclass(frozen=True)
class ClassFolder:
    """One folder of class folders (<folder>/<class>/<image>: a split of an image-folder
    dataset, or data to evaluate), paths relative to it."""

    # class name -> its image files, sorted, each as (its path as listed, the path it is read
    # at: a link's target's); a class may have none. A link is named as listed, under the class
    # folder it is listed in, which is the class it is scored as.
    files: dict[str, list[tuple[str, str]]]
    skipped: int

    def note(self) -> str:
        return FolderListing((), (), (), self.skipped).note()


def list_class_folder(folder: RunPath, limit_s: float = LIST_LIMIT_S) -> ClassFolder:
    """`folder`'s class folders and their images, by this module's rules (hidden and non-image
    files skipped and counted; on a volume no link leading out of `folder` or to a folder);
    ConfigError naming the problems otherwise. Class names are judged by the caller."""
    files, skipped = _list_one(folder, limit_s, _as_listed(_class_of))
    return ClassFolder({name: sorted(paths) for name, paths in files.items()}, skipped)


def list_images(
    folder: RunPath, limit_s: float = LIST_LIMIT_S
) -> tuple[list[tuple[str, str]], int]:
    """Every image file below `folder`, at any depth, as (its path as listed, the path it is
    read at: a link's target's) relative to `folder`, sorted, and how many files were
    skipped, by this module's rules; ConfigError naming the problems. Predictions name each
    file as listed: a link and its target are two rows, each under its own name."""
    files, skipped = _list_one(folder, limit_s, _as_listed(_any_image))
    return sorted(files.get("", [])), skipped


def _list_one(folder: RunPath, limit_s: float, add: _Adder) -> tuple[dict[str, list[Any]], int]:
    problems = Problems()
    try:
        found = _split(folder, "", limit_s, problems, add, time.monotonic())
    except DeadlineExceeded:
        raise ConfigError(
            f"{folder}: listing took over {limit_s:g} s; for data this large write the Parquet "
            "layout once with `trainctl prepare-data --from-folder`"
        ) from None
    except _Missing as missing:
        what = "is a file, not a folder" if missing.is_file else "folder not found"
        raise ConfigError(f"{folder}: {what}") from None
    if problems:
        raise ConfigError(problems)
    total = sum(map(len, found[0].values()))
    if total > MAX_FILES:
        raise ConfigError(
            f"{folder}: {total:,} image files, over the {MAX_FILES:,} one listing may hold; "
            "give a part of it, or write it as Parquet with `trainctl prepare-data`"
        )
    return found


def _flat_classes(root: RunPath, limit_s: float) -> str:
    """The class folders holding images directly under `root`, listed ("" where none, or
    where `root` cannot be listed)."""
    try:
        classes, _ = _split(root, "", limit_s, Problems(), _add, time.monotonic())
    except (_Missing, DeadlineExceeded, OSError, ConfigError):
        return ""
    names = sorted(name for name, files in classes.items() if files)
    return ", ".join(names[:5]) + (f" ... ({len(names)} in all)" if len(names) > 5 else "")


def _split(
    root: RunPath, split: str, limit_s: float, problems: Problems, add: _Adder, started: float
) -> tuple[dict[str, list[Any]], int]:
    """`split` below `root` ("": `root` itself), walked (app/storage/tree.py) and listed with
    `add`'s rule; paths relative to `root`, inside which every link must lead."""
    try:
        found = walk(root, split, limit_s, started)
    except FileNotFoundError:
        raise _Missing(is_file=(root / split if split else root).is_file()) from None
    for link in found.refused:
        problems.add(_link_problem(link.path, link.target, link.real_root, link.why))
    classes: dict[str, list[Any]] = {}
    for parts in found.folders:
        if len(parts) == 1 and not parts[0].startswith("."):
            classes.setdefault(parts[0], [])
    skipped, not_utf8 = found.others, []
    for parts, relative in found.files:
        if not add(classes, parts, relative):
            skipped += 1
        elif not is_utf8(relative):
            not_utf8.append(relative)
    if not_utf8:
        listed = ", ".join(shown(n) for n in not_utf8[:3]) + (" ..." if len(not_utf8) > 3 else "")
        problems.add(
            f"{root / split if split else root}: {len(not_utf8)} image file name(s) are not "
            f"UTF-8 ({listed}, shown escaped); {NOT_UTF8}"
        )
    return classes, skipped


def _link_problem(path: Path, target: str, real_root: Path, what: str) -> str:
    return (
        f"{shown(path)}: is a symbolic link to {shown(target)}, {what}; trainctl follows only "
        f"links to image files inside the data folder {shown(real_root)}: copy the files in"
    )
