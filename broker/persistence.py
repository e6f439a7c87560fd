"""Small JSON documents written atomically (write to a temp file, fsync, rename).

Topic configs, subscription groups and consumer offsets are small and change rarely
compared with messages; JSON keeps them readable by operators, and the rename makes a
crash leave either the old or the new version, never half of one.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def load_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        backup = Path(str(path) + ".bak")
        log.error("cannot read %s (%s); trying %s", path, exc, backup)
        try:
            return json.loads(backup.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return default


def save_json(path: Path, data: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    if path.exists():
        os.replace(path, Path(str(path) + ".bak"))
    os.replace(tmp, path)
