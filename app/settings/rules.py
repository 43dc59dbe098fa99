"""Checks several settings sections share."""

from __future__ import annotations

import re


def name_or_empty(value: str, pattern: re.Pattern[str], rule: str) -> str:
    """`value` when empty (the setting's default name applies) or matching `pattern`; else
    ValueError saying `rule`, the rule a name must follow."""
    if value and not pattern.match(value):
        raise ValueError(rule)
    return value
