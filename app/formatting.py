"""How durations, names and lines from storage read, the same on `trainctl train`'s console,
in `submit --wait` and in every message.

Torch-free and Kubernetes-free, so that both the training driver and the cluster commands can
import it cheaply. (The epoch line is the epoch record's own: app/runfolder/epoch_record.py.)
"""

from __future__ import annotations

import math
from typing import Any

from app.redact import redact_text, redact_uri


def finite(value: Any) -> float | None:
    """A number read from a record another hand wrote, as a float; None for anything else:
    text, a bool, NaN, an infinity, or an integer too large for a float (math.isfinite
    raises on one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def is_finite(value: Any) -> bool:
    """Whether a record's value is a number `finite` would read (for a bound check beside it)."""
    return finite(value) is not None


def shown_figure(value: Any) -> float | None:
    """A figure as a line prints it: any float, NaN and the infinities included (they say a
    run diverged), or an int a float holds; None for anything else (text, a bool, an integer
    past a float, on which a format such as `{:.4f}` raises)."""
    if isinstance(value, float):
        return value
    return finite(value)


def whole(value: Any, least: int | None = None, most: int | None = None) -> int | None:
    """A whole number read from a record another hand wrote (a count, an epoch, a version),
    within least..most where given; None for anything else: a bool (JSON's true is no count),
    a float (2.0), text."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if (least is not None and value < least) or (most is not None and value > most):
        return None
    return value


def mapping(value: Any) -> dict[str, Any]:
    """A part of a record another hand wrote (a summary, sweep.json, values) that should be a
    mapping; {} for anything else (a damaged file, a value of another type)."""
    return value if isinstance(value, dict) else {}


def json_safe(value: Any) -> Any:
    """`value` with every number that strict JSON cannot hold (NaN, infinities, integers past
    a float) replaced by None, for `--json` output that any parser reads."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, float | int) and not isinstance(value, bool) and finite(value) is None:
        return None
    return value


def format_duration(seconds: float) -> str:
    """45s, 2m05s, 3h07m, 4d: short, and precise where it matters."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d"


CUT_MARGIN = 64  # what one_line keeps past its limit before redacting: what masks shorten


def counted(count: int, noun: str) -> str:
    """`1 trial`, `2 trials`: an English count of a noun whose plural takes an s."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def one_line(text: str, limit: int) -> str:
    """A string from storage many hands write (a run folder, a champion pointer), as printed:
    redacted, control characters escaped, cut to `limit` characters; it can neither leak a
    credential nor break a table or drive a terminal."""
    if len(text) > limit + CUT_MARGIN:
        # Cut before redacting: redact_text's patterns take quadratic time on a long run of
        # letters. At a space, so that no credential is cut in half and escapes redaction.
        head = text[: limit + CUT_MARGIN].rsplit(None, 1)
        text = (head[0] if len(head) == 2 else "") + " ..."
    text = redact_text(text)
    if not text.isprintable():
        text = repr(text)[1:-1]  # escapes, without the quotes a clean line would not have
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_path(path: object, limit: int = 300) -> str:
    """A path from storage as printed: as one_line, but a path too long for a line keeps its
    start and its end (it has no spaces for one_line to cut at)."""
    text = str(path)
    if len(text) > limit:
        text = f"{text[: limit // 2]}...{text[-(limit // 4) :]}"
    return one_line(text, limit + 8)


def shown(text: object) -> str:
    """A name as messages show it: as is when printable, else escaped like Python's repr;
    a URI through the project's redaction rule."""
    value = redact_uri(str(text))
    return value if value.isprintable() else repr(value)


def yaml_problem(err: Exception) -> str:
    """A YAML parse error in one line: the line and column, then PyYAML's words (its message
    spans lines, which a one-line refusal printed as literal \\n); a tab, YAML's most common
    trap, says so."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is None or not problem:
        return one_line(str(err), 200)
    context = getattr(err, "context", None)
    said = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    said += f" ({context})" if context else ""
    if "'\\t'" in problem:
        said += "; YAML indents with spaces, never tabs"
    return one_line(said, 300)


def printable_line(text: str) -> str:
    """One line as trainctl prints it: control characters (a newline that would start a line of
    its own, forging a `check` verdict or a problem; an escape sequence that recolours the
    terminal, retitles it, writes the clipboard or plants a link) shown escaped, tabs kept.
    What reaches a line comes from settings, paths, logs and files many hands write: logs lie
    in folders other jobs can write, and pods print what they like."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)


# A spreadsheet opening a CSV runs a text cell that starts with one of these as a formula
# (=HYPERLINK, =cmd|...): class folder names and image file names come from whoever wrote the
# folder. OWASP's rule: such a cell is written with a leading ' (shown, not run).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: object) -> object:
    """A cell for a CSV a person may open in a spreadsheet: text that would be run as a formula
    gets a leading ', everything else (numbers included) is written as is."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
