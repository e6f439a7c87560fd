"""Java-properties configuration with RocketMQ's key names.

Each process declares its keys once (name, type, default, one doc line).  Parsing
follows RocketMQ's behaviour users know, with two improvements: an unknown key is a
warning that names the key (a typo no longer silently does nothing), and a bad value
stops start-up with an error naming key and value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names key and value.  The base of every
    configuration error (telemetry's TelemetryConfigError, DLedger's and the Raft core's included)."""


def parse_bool(text: str) -> bool:
    """The one boolean parser of every config file and option: ``true`` or ``false``, in any case.

    RocketMQ reads these keys with Java's Boolean.parseBoolean, which takes ``true`` as true and
    anything else as false, so ``yes`` or ``1`` in a broker.conf silently means false there.  Here
    such a value is refused with an error naming the key (the callers add it) instead of being read
    differently from Apache RocketMQ."""
    low = text.strip().lower()
    if low == "true":
        return True
    if low == "false":
        return False
    raise ValueError("expected true or false")


def bool_key(raw: Mapping[str, str], key: str, default: bool) -> bool:
    """A boolean key read straight from a properties map (the security and TLS settings, which every process
    reads from its raw config): ``default`` when absent or blank, else :func:`parse_bool`; ConfigError names
    the key and its value."""
    text = raw.get(key) or ""
    if not text.strip():
        return default
    try:
        return parse_bool(text)
    except ValueError:
        raise ConfigError(f"config key {key} has bad value {text!r}: expected true or false") from None


@dataclass(frozen=True)
class Key:
    name: str
    kind: type
    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None

    def parse(self, raw: str) -> Any:
        text = raw.strip()
        try:
            if self.kind is bool:
                value: Any = parse_bool(text)
            elif self.kind is int:
                value = int(text)
            elif self.kind is float:
                value = float(text)
            else:
                value = text
        except ValueError as exc:
            raise ConfigError(f"config key {self.name} has bad value {raw!r}: {exc}") from exc
        if self.choices and str(value).upper() not in self.choices:
            raise ConfigError(
                f"config key {self.name} has bad value {raw!r}: expected one of {', '.join(self.choices)}")
        if self.choices:
            value = str(value).upper()
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ConfigError(f"config key {self.name} has bad value {raw!r}: {problem}")
        return value


def positive(value: Any) -> str | None:
    return None if value > 0 else "must be positive"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must not be negative"


def port(value: Any) -> str | None:
    return None if 0 <= value <= 65535 else "must be a TCP port (0-65535)"


def read_properties(path: str | Path) -> dict[str, str]:
    """Parse a Java-properties file: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuation."""
    props: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start})") from exc
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            key, value = line, ""
        else:
            key, value = line[:sep].strip(), line[sep + 1 :].strip()
        props[key] = value
    return props


class Settings:
    """Typed values for a set of keys; attribute access by RocketMQ key name.

    Each value is also an instance attribute, so ``settings.maxMessageSize`` is a plain attribute
    read: through ``__getattr__`` alone every read first failed the normal lookup, which builds
    an AttributeError, ~0.5 µs a read and ~5 % of a single send (docs/BENCHMARKS.md "Single sends
    over remoting (session 20)").  ``__getattr__`` stays for the few names that would shadow a
    method or ``raw`` (none of RocketMQ's keys today).
    """

    def __init__(self, keys: Iterable[Key], values: Mapping[str, Any], raw: Mapping[str, str]) -> None:
        self._keys = {k.name: k for k in keys}
        self._values = dict(values)
        self.raw = dict(raw)
        for name, value in self._values.items():
            self._mirror(name, value)

    def _mirror(self, name: str, value: Any) -> None:
        if name.isidentifier() and name not in _SETTINGS_OWN_NAMES:
            self.__dict__[name] = value

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def key(self, name: str) -> Key | None:
        """The definition of key ``name`` (its type and parser), or None when it is not one of these keys."""
        return self._keys.get(name)

    def set(self, name: str, value: Any) -> None:
        self._values[name] = value
        self._mirror(name, value)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)


_SETTINGS_OWN_NAMES = frozenset(dir(Settings)) | {"raw", "_keys", "_values"}
"""Names a key's value must not shadow as an instance attribute (read through ``__getattr__`` instead)."""


def load_settings(keys: Iterable[Key], raw: Mapping[str, str], *, extra_known: Iterable[str] = (),
                  what: str = "config") -> Settings:
    """Typed settings from raw key/value strings; unknown keys warn, bad values raise ConfigError."""
    keys = list(keys)
    by_name = {k.name: k for k in keys}
    known_extra = set(extra_known)
    values = {k.name: k.default for k in keys}
    for name, text in raw.items():
        key = by_name.get(name)
        if key is None:
            if name not in known_extra and not name.startswith("tls."):
                log.warning("unknown %s key %r is ignored (check its spelling)", what, name)
            continue
        values[name] = key.parse(text)
    return Settings(keys, values, raw)


def keys_table(keys: Iterable[Key]) -> str:
    """A Markdown table of keys, defaults and docs (for docs/CONFIG.md)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for k in keys:
        default = "" if k.default is None else str(k.default)
        lines.append(f"| `{k.name}` | `{default}` | {k.doc} |")
    return "\n".join(lines)
