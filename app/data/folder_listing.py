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
- image files are recognised by extension (torchvision's IMG_EXTENSIONS); other files, names
  starting with "." and files directly in train/ or valid/ are skipped and counted, since
  datasets carry README files, .DS_Store and labels files that are not a problem;
- on a volume a symbolic link leading out of the data folder is refused, and so is any link
  to a folder (it could loop or count images twice); a link to a file inside the folder is
  read as its target, which the workers open without following links (app/storage/safe_fs.py).
Names are shown escaped (repr) when they hold newlines or other unprintable characters, so a
file name can never forge a line of a message or a log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from app.data.class_meta import names_problem
from app.data.schema import MAX_CLASSES, OPTIONAL_SPLITS, SPLITS, Problems
from app.errors import ConfigError
from app.redact import redact_uri
from app.storage.buckets import ObjectPath
from app.storage.deadline import DeadlineExceeded, call_with_deadline
from app.storage.location import RunPath, local_path

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MAX_FILES = 2_000_000  # every file becomes a row the driver holds in memory; prepare beyond
LIST_LIMIT_S = 300.0  # listing a bucket of MAX_FILES objects takes about two minutes
MAX_PROBLEMS = 12
LAYOUT_HELP = "a folder dataset holds train/<class>/<image> and valid/<class>/<image>"


@dataclass(frozen=True)
class FolderListing:
    """Image files as (path relative to the data folder, label); links already resolved."""

    class_names: tuple[str, ...]
    train: tuple[tuple[str, int], ...]
    valid: tuple[tuple[str, int], ...]
    skipped: int  # files that are not images by their name
    test: tuple[tuple[str, int], ...] = ()  # the optional held-out split; () where absent
    has_test: bool = False

    def note(self) -> str:
        if not self.skipped:
            return ""
        return (
            f"{self.skipped} files skipped (not {'/'.join(e[1:] for e in IMAGE_EXTENSIONS)}, "
            "hidden, or not inside a class folder)"
        )


def shown(text: object) -> str:
    """A name as messages show it: as is when printable, else escaped like Python's repr;
    a URI through the project's redaction rule."""
    value = redact_uri(str(text))
    return value if value.isprintable() else repr(value)


def list_folder(root: RunPath, limit_s: float = LIST_LIMIT_S) -> FolderListing:
    """The dataset's classes and image files, or ConfigError with one line per problem."""
    problems = Problems()
    deadline = time.monotonic() + limit_s
    found: dict[str, tuple[dict[str, list[str]], int]] = {}
    local = local_path(root)
    for split in SPLITS + OPTIONAL_SPLITS:
        try:
            if local is not None:
                found[split] = _local_split(local, split, deadline, problems)
            else:
                # A client whose requests end within the limit too: none is left talking.
                client = root.with_budget(limit_s)  # type: ignore[union-attr]
                found[split] = call_with_deadline(
                    lambda s=split, c=client: _bucket_split(c, s), limit_s, str(root / split)
                )
        except DeadlineExceeded:
            raise ConfigError(
                f"{root}: listing {split}/ took over {limit_s:g} s; for data this large write "
                "the Parquet layout once with `trainctl prepare-data --from-folder` and train "
                "with TRAIN_DATASET=parquet"
            ) from None
        except _Missing:
            if split not in OPTIONAL_SPLITS:
                problems.add(f"{root / split}: folder not found; {LAYOUT_HELP}")
    if problems and root.name in SPLITS and len(set(found) & set(SPLITS)) < len(SPLITS):
        # The likeliest slip: the train/ (or valid/) folder given instead of the one above it.
        problems.add(f"{root} is itself a split folder: did you mean {root.parent}?")
    if problems:
        raise ConfigError(problems)
    train, train_skipped = found["train"]
    valid, valid_skipped = found["valid"]
    test, test_skipped = found.get("test", ({}, 0))
    names = tuple(sorted(train))
    _judge(root, names, train, valid, problems)
    if "test" in found:
        _judge_held_out(root / "test", names, test, problems)
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
    )


def _judge_held_out(
    folder: RunPath, names: tuple[str, ...], split: dict[str, list[str]], problems: Problems
) -> None:
    """test/ by valid/'s rules: only classes train/ has, and at least one image."""
    unknown = sorted(set(split) - set(names))
    if unknown:
        listed = ", ".join(shown(n) for n in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        problems.add(
            f"{folder}: {len(unknown)} class(es) not in train/: {listed}; test/ may only hold "
            "classes that train/ has"
        )
    total = sum(map(len, split.values()))
    if total > MAX_FILES:
        problems.add(f"{folder}: {total:,} image files, over the {MAX_FILES:,} a split may hold")
    if not any(split.values()):
        problems.add(
            f"{folder}: no image files; the optional test split needs at least one, or remove "
            "the folder"
        )


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
    unknown = sorted(set(valid) - set(names))
    if unknown:
        listed = ", ".join(shown(n) for n in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        problems.add(
            f"{root / 'valid'}: {len(unknown)} class(es) not in train/: {listed}; valid/ may only "
            "hold classes that train/ has"
        )
    total = sum(map(len, train.values())) + sum(map(len, valid.values()))
    if total > MAX_FILES:
        problems.add(
            f"{root}: {total:,} image files, over the {MAX_FILES:,} a folder dataset may hold; "
            "write them as Parquet with `trainctl prepare-data --from-folder`"
        )
    if not any(valid.values()):
        problems.add(f"{root / 'valid'}: no image files; the valid split needs at least one")


class _Missing(Exception):
    """The split's folder is not there."""


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")


def _add(classes: dict[str, list[str]], parts: tuple[str, ...], relative: str) -> bool:
    """File `parts` (below the split) under its class; False when it is skipped."""
    if len(parts) < 2 or any(p.startswith(".") for p in parts) or not _is_image(parts[-1]):
        return False
    classes.setdefault(parts[0], []).append(relative)
    return True


def _add_any(classes: dict[str, list[str]], parts: tuple[str, ...], relative: str) -> bool:
    """An image file at any depth, under the key "" (images to classify, no classes)."""
    if any(p.startswith(".") for p in parts) or not _is_image(parts[-1]):
        return False
    classes.setdefault("", []).append(relative)
    return True


_Adder = Callable[[dict[str, list[str]], tuple[str, ...], str], bool]


@dataclass(frozen=True)
class ClassFolder:
    """One folder of class folders (<folder>/<class>/<image>: a split of an image-folder
    dataset, or data to evaluate), paths relative to it; links already resolved."""

    files: dict[str, list[str]]  # class name -> its image files, sorted; a class may have none
    skipped: int

    def note(self) -> str:
        return FolderListing((), (), (), self.skipped).note()


def list_class_folder(folder: RunPath, limit_s: float = LIST_LIMIT_S) -> ClassFolder:
    """`folder`'s class folders and their images, by this module's rules (hidden and non-image
    files skipped and counted; on a volume no link leading out of `folder` or to a folder);
    ConfigError naming the problems otherwise. Class names are judged by the caller."""
    files, skipped = _list_one(folder, limit_s, _add)
    return ClassFolder({name: sorted(paths) for name, paths in files.items()}, skipped)


def list_images(folder: RunPath, limit_s: float = LIST_LIMIT_S) -> tuple[list[str], int]:
    """Every image file below `folder`, at any depth (paths relative to it, sorted), and how
    many files were skipped, by this module's rules; ConfigError naming the problems."""
    files, skipped = _list_one(folder, limit_s, _add_any)
    return sorted(files.get("", [])), skipped


def _list_one(folder: RunPath, limit_s: float, add: _Adder) -> tuple[dict[str, list[str]], int]:
    problems = Problems()
    local = local_path(folder)
    try:
        if local is not None:
            found = _local_split(local, "", time.monotonic() + limit_s, problems, add)
        else:
            client = folder.with_budget(limit_s)  # type: ignore[union-attr]
            found = call_with_deadline(lambda: _bucket_split(client, "", add), limit_s, str(folder))
    except DeadlineExceeded:
        raise ConfigError(
            f"{folder}: listing took over {limit_s:g} s; for data this large write the Parquet "
            "layout once with `trainctl prepare-data --from-folder`"
        ) from None
    except _Missing:
        raise ConfigError(f"{folder}: folder not found") from None
    if problems:
        raise ConfigError(problems)
    total = sum(map(len, found[0].values()))
    if total > MAX_FILES:
        raise ConfigError(
            f"{folder}: {total:,} image files, over the {MAX_FILES:,} one listing may hold; "
            "give a part of it, or write it as Parquet with `trainctl prepare-data`"
        )
    return found


def _bucket_split(
    root: ObjectPath, split: str, add: _Adder = _add
) -> tuple[dict[str, list[str]], int]:
    """`split` below `root` ("": `root` itself), listed with `add`'s rule."""
    base = f"{root.key}/{split}" if split else root.key
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    infos = root.fs.get_file_info(selector)
    if not infos and not (root / split if split else root).is_dir():
        raise _Missing()
    classes: dict[str, list[str]] = {}
    skipped = 0
    for info in infos:
        parts = tuple(info.path[len(base) + 1 :].split("/"))
        if info.type == pafs.FileType.Directory:
            if len(parts) == 1 and not parts[0].startswith("."):
                classes.setdefault(parts[0], [])
        elif not add(classes, parts, "/".join((split, *parts) if split else parts)):
            skipped += 1
    return classes, skipped


def _local_split(
    root: Path, split: str, deadline: float, problems: Problems, add: _Adder = _add
) -> tuple[dict[str, list[str]], int]:
    """`split` below `root` ("": `root` itself), listed with `add`'s rule; paths relative to
    `root`, inside which every link must lead."""
    real_root = Path(os.path.realpath(root))
    top = real_root / split
    if top.is_symlink() or not top.is_dir():
        if top.is_symlink():
            problems.add(_link_problem(root / split, real_root, "a link to a folder"))
            return {}, 0
        raise _Missing()
    classes: dict[str, list[str]] = {}
    skipped = 0
    stack = [top]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if time.monotonic() > deadline:
                    raise DeadlineExceeded(str(root / split), LIST_LIMIT_S)
                path = Path(entry.path)
                parts = path.relative_to(top).parts
                if entry.is_symlink():
                    target = _link_target(path, real_root, problems)
                    if target is not None and not add(classes, parts, target):
                        skipped += 1
                elif entry.is_dir(follow_symlinks=False):
                    if len(parts) == 1 and not parts[0].startswith("."):
                        classes.setdefault(parts[0], [])
                    stack.append(path)
                elif not (
                    entry.is_file(follow_symlinks=False)
                    and add(classes, parts, path.relative_to(real_root).as_posix())
                ):
                    skipped += 1
    return classes, skipped


def _link_target(path: Path, real_root: Path, problems: Problems) -> str | None:
    """A link's target relative to the data folder when it is a file inside it, else None
    (and a problem)."""
    target = Path(os.path.realpath(path))
    if not target.is_relative_to(real_root):
        problems.add(_link_problem(path, real_root, "outside the data folder"))
        return None
    if not target.is_file():
        problems.add(_link_problem(path, real_root, "a link to a folder"))
        return None
    return target.relative_to(real_root).as_posix()


def _link_problem(path: Path, real_root: Path, what: str) -> str:
    target = os.path.realpath(path)
    return (
        f"{shown(path)}: is a symbolic link to {shown(target)}, {what}; trainctl follows only "
        f"links to image files inside the data folder {shown(real_root)}: copy the files in"
    )
