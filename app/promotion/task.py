"""What a model answers: its class names in order, and the channels and size of its input.

A champion is replaced only by a model of the same task: a model trained on another folder
(another class list, or the same names in another order, so label i means something else)
would make a server that follows the pointer answer another question. The default
TRAIN_MODEL_NAME, <dataset>-<model>, is shared by every image-folder project training the same
model, so this is compared on every promotion, whatever the gate says, and a new task needs a
new TRAIN_MODEL_NAME.

The pointer records the task of its champion (`task`), taken from the card whose sha256 it
records, so the comparison reads one small file under the lock; a pointer written before it
had one is judged by its champion's model card, read bounded, without following links, and
only once its sha256 matches the pointer's `card_sha256`. Class names are compared through a
sha256 of the whole list, and the pointer lists at most MAX_LISTED of them (100,000 names
would not fit in a pointer); messages show the first few.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from app.data.schema import DatasetInfo
from app.formatting import one_line
from app.redact import redact
from app.runfolder.class_names import describe_difference

MAX_LISTED = 1000  # class names a pointer lists; the digest covers them all
SHOWN = 10  # class names a message shows
MAX_NAME_CHARS = 40  # of each name, as shown


@dataclass(frozen=True)
class Task:
    class_names: tuple[str, ...]  # the first MAX_LISTED, label i first
    classes: int
    names_sha256: str  # of the whole list, as JSON
    channels: int
    height: int
    width: int

    @classmethod
    def of(cls, names: list[str], channels: int, height: int, width: int) -> Task:
        digest = hashlib.sha256(json.dumps(list(names)).encode()).hexdigest()
        return cls(tuple(names[:MAX_LISTED]), len(names), digest, channels, height, width)

    @classmethod
    def of_info(cls, info: DatasetInfo) -> Task:
        """The task of a run on this data, as its card will record it (names redacted as the
        card's are: app/export/build.py)."""
        names = redact(list(info.label_names()))
        return cls.of(names, info.channels, info.height, info.width)

    @classmethod
    def from_card(cls, card: dict[str, Any]) -> Task:
        """The task of a model card app/export/card.py has shape-checked."""
        spec = card["input"]
        return cls.of(list(card["class_names"]), spec["channels"], spec["height"], spec["width"])

    @classmethod
    def from_record(cls, record: Any) -> Task:
        """A pointer's `task`; ValueError naming what is wrong with it."""
        if not isinstance(record, dict):
            raise ValueError("`task` is not an object")
        names = record.get("class_names")
        whole = [record.get(key) for key in ("classes", "channels", "height", "width")]
        if not all(type(v) is int and v > 0 for v in whole):
            raise ValueError("`task` needs whole numbers classes, channels, height and width")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("`task.class_names` is not a list of names")
        digest = record.get("class_names_sha256")
        if not isinstance(digest, str) or len(names) > whole[0]:
            raise ValueError("`task.class_names_sha256` is missing or the names do not fit")
        return cls(tuple(names), whole[0], digest, whole[1], whole[2], whole[3])

    def record(self) -> dict[str, Any]:
        return {
            "class_names": list(self.class_names),
            "classes": self.classes,
            "class_names_sha256": self.names_sha256,
            "channels": self.channels,
            "height": self.height,
            "width": self.width,
        }

    def same(self, other: Task) -> bool:
        mine = (self.classes, self.names_sha256, self.channels, self.height, self.width)
        return mine == (other.classes, other.names_sha256, other.channels, other.height,
                        other.width)  # fmt: skip

    def difference(self, other: Task) -> str:
        """What differs from `other`, in a few words: the class lists' difference where both are
        listed whole (same names in another Unicode normalisation, as a copy made on macOS
        has, or in another order: label i would mean another class), the input's shape."""
        parts = []
        if self.names_sha256 != other.names_sha256:
            whole = self.classes == len(self.class_names) and other.classes == len(
                other.class_names
            )
            parts.append(
                describe_difference(self.class_names, other.class_names)
                if whole
                else f"{self.classes} classes, {other.classes} now, or other names"
            )
        shapes = [(t.channels, t.height, t.width) for t in (self, other)]
        if shapes[0] != shapes[1]:
            parts.append("input {}x{}x{}, now {}x{}x{}".format(*shapes[0], *shapes[1]))
        return "; ".join(parts)

    def describe(self) -> str:
        """`classes [circle, square, triangle] 3x32x32` (channels x height x width)."""
        shown = [one_line(name, MAX_NAME_CHARS) for name in self.class_names[:SHOWN]]
        if self.classes > len(shown):
            shown.append(f"... {self.classes} in all")
        return f"classes [{', '.join(shown)}] {self.channels}x{self.height}x{self.width}"


def another_task(champion: Task, candidate: Task, name: str, version: Any) -> str | None:
    """Why `candidate` may not replace `champion` (the reason of a kept run), or None."""
    if champion.same(candidate):
        return None
    return (
        f"another task: champion {name} v{version} {champion.describe()}; this run "
        f"{candidate.describe().removeprefix('classes ')} ({champion.difference(candidate)}); "
        "use another TRAIN_MODEL_NAME for a new task"
    )
