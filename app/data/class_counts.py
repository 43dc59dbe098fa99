"""How many images each class has in train/ and valid/ (and test/, where the dataset holds
one), for `trainctl check`, and which classes are too small to learn or to measure.

The counts are the dataset description's (app/data/schema.py DatasetInfo): an image folder's
from its listing, a Parquet dataset's from its label columns. The thresholds:
a class with fewer than MIN_TRAIN images in train/ gives the model too little to learn it
from, and one with fewer than MIN_VALID in valid/ (none included: valid/ may lack a class)
makes its accuracy a matter of one or two images; so does one with fewer than MIN_VALID in a
held-out test/, which the promotion gate is judged on where it exists. Each is a warning, not
an error: a deliberate tiny dataset still trains.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.data.schema import DatasetInfo
from app.formatting import shown

MIN_TRAIN = 10
MIN_VALID = 5
LISTED = 10  # up to this many classes, every class is listed; beyond, the smallest
SMALLEST = 5
NAME_CHARS = 40


@dataclass(frozen=True)
class ClassCounts:
    names: tuple[str, ...]  # label i's name (its number where the data names none)
    train: tuple[int, ...]
    valid: tuple[int, ...]
    test: tuple[int, ...] | None = None  # None: the dataset has no held-out test/

    def _splits(self) -> list[tuple[str, tuple[int, ...]]]:
        found = [("train", self.train), ("valid", self.valid)]
        return found + ([("test", self.test)] if self.test is not None else [])

    def detail(self) -> str:
        """e.g. `images per class, train/valid: cat 30/10, dog 30/10, emu 3/1` (train/valid/test
        with a test/), or for many classes their range and the smallest."""
        splits = self._splits()
        if len(self.names) <= LISTED:
            columns = zip(*(counts for _, counts in splits), strict=True)
            listed = ", ".join(
                f"{_name(n)} {'/'.join(map(str, c))}"
                for n, c in zip(self.names, columns, strict=True)
            )
            return f"images per class, {'/'.join(s for s, _ in splits)}: {listed}"
        parts = [
            f"{split} {_range(counts)}{' images per class' if split == 'train' else ''} "
            f"(smallest: {self._smallest(counts)})"
            for split, counts in splits
        ]
        return f"{len(self.names):,} classes; " + "; ".join(parts)

    def warning(self) -> str | None:
        """The classes too small to learn or to measure, or None."""
        splits = [
            (self.train, MIN_TRAIN, "train/", "too few to learn the class from"),
            (self.valid, MIN_VALID, "valid/", "too few to measure its accuracy"),
        ]
        if self.test is not None:
            splits.append((self.test, MIN_VALID, "test/", "too few to judge it on"))
        found = [
            f"{part}: {why}"
            for counts, least, where, why in splits
            if (part := _few(self.names, counts, least, where))
        ]
        return "; ".join(found) + "; add images" if found else None

    def _smallest(self, counts: tuple[int, ...]) -> str:
        order = sorted(range(len(counts)), key=lambda i: (counts[i], i))[:SMALLEST]
        return ", ".join(f"{_name(self.names[i])} {counts[i]}" for i in order)


def _few(names: tuple[str, ...], counts: tuple[int, ...], least: int, where: str) -> str | None:
    small = sorted((c, i) for i, c in enumerate(counts) if c < least)
    if not small:
        return None
    listed = ", ".join(f"{_name(names[i])} {c}" for c, i in small[:SMALLEST])
    more = f" and {len(small) - SMALLEST:,} more" if len(small) > SMALLEST else ""
    plural = "es" if len(small) > 1 else ""
    return f"{len(small):,} class{plural} under {least} images in {where} ({listed}{more})"


def _range(counts: tuple[int, ...]) -> str:
    return f"{min(counts):,}-{max(counts):,}"


def _name(name: str) -> str:
    text = shown(name)
    return text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 3] + "..."


def class_counts(info: DatasetInfo) -> ClassCounts:
    """Per-class image counts of the dataset preflight inspected (`info`), as inspection
    counted them (an image folder's listing, a Parquet dataset's label columns)."""
    test = info.test_class_counts if info.test_rows is not None else None
    return ClassCounts(info.label_names(), info.train_class_counts, info.valid_class_counts, test)
