"""Generated docs stay in step with the code."""

from __future__ import annotations

from pathlib import Path

from rocketscope.config_doc import render

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_config_doc_is_current() -> None:
    assert (DOCS / "CONFIG.md").read_text() == render(), "run: python -m rocketscope.config_doc > docs/CONFIG.md"


def test_every_key_has_a_default_and_a_doc_line() -> None:
    from rocketscope.broker.broker_config import BROKER_KEYS
    from rocketscope.broker.namesrv.server import NAMESRV_KEYS

    for key in [*BROKER_KEYS, *NAMESRV_KEYS]:
        assert key.default is not None and key.doc.strip(), key.name
