"""A remoting subscription's tag expression (``a || b``), shared by the pull and the POP handlers."""

from __future__ import annotations


def parse_tags(sub_string: str) -> set[str] | None:
    """``*`` or empty -> every tag; ``a || b`` -> {a, b}."""
    text = (sub_string or "").strip()
    if text in ("", "*"):
        return None
    return {t.strip() for t in text.split("||") if t.strip()} or None
