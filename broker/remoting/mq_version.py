"""The names of RocketMQ's client versions: a remoting header's ``version`` is an ordinal of MQVersion.Version.

Apache's Java client sends ``MQVersion.CURRENT_VERSION``, the ordinal of its release in the enum
(479 for 5.3.3), and Apache's broker and tools show its name: mqadmin consumerConnection prints
``V5_3_3``, the broker's connection gauges label ``version="v5_3_3"`` (the name lower-cased).  The enum
(rocketmq-common 5.3.3, listed by running ``MQVersion.Version.values()`` against the jar: 613 entries,
tests/test_remoting_version.py compares this table with it) has a regular shape: sixteen 3.0.0 pre-releases,
then a ``_SNAPSHOT`` and a release for every version from 3.0.1 to 5.9.9 in the patch ranges below, then
``HIGHER_VERSION``, which Apache's ``getVersionDesc`` answers for every ordinal past the end.
"""

from __future__ import annotations

from functools import cache

_V3_0_0 = ["SNAPSHOT", "ALPHA1", *(f"BETA{i}" for i in range(1, 6)),
           *(s for i in range(6, 10) for s in (f"BETA{i}_SNAPSHOT", f"BETA{i}")), "FINAL"]
# (major, minor) -> the patch versions the enum lists
_PATCHES: list[tuple[int, int, range]] = [
    (3, 0, range(1, 16)), (3, 1, range(0, 10)), (3, 2, range(0, 10)),
    *((3, minor, range(1, 10)) for minor in range(3, 10)),
    *((major, minor, range(0, 10)) for major in (4, 5) for minor in range(10)),
]
HIGHER_VERSION = "HIGHER_VERSION"


@cache
def names() -> tuple[str, ...]:
    """MQVersion.Version's names by ordinal."""
    out = [f"V3_0_0_{s}" for s in _V3_0_0]
    for major, minor, patches in _PATCHES:
        for patch in patches:
            out += [f"V{major}_{minor}_{patch}_SNAPSHOT", f"V{major}_{minor}_{patch}"]
    out.append(HIGHER_VERSION)
    return tuple(out)


def version_desc(ordinal: int) -> str:
    """What Apache's ``MQVersion.getVersionDesc`` answers: the name, HIGHER_VERSION past the end; a negative
    ordinal (no Apache client sends one) stays the number."""
    table = names()
    if ordinal < 0:
        return str(ordinal)
    return table[min(ordinal, len(table) - 1)]
