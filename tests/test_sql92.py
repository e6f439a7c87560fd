"""SQL92 filter parser and evaluator without a process: fuzzing for robustness, and answers recorded from
Apache RocketMQ 5.3.3's own filter jar (tests/test_sql92_oracle.py asks the jar directly).

Also the queue selection of a FIFO message group (broker/topics.py) against the queues Apache RocketMQ
5.3.3's proxy chose, observed with the reference cluster.
"""

from __future__ import annotations

import pytest
import sql92_cases as cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketscope.broker.filter import FilterRefused, SqlFilter, accepts, compile_filter
from rocketscope.broker.filter.sql92 import EvalError, SqlParseError, compile_sql92
from rocketscope.broker.store.record import StoredMessage
from rocketscope.broker.topics import consistent_hash, group_queue, java_string_hash


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(expr=st.one_of(cases.expressions, st.text(max_size=60)), props=cases.properties)
def test_parser_and_evaluator_never_fail_other_than_as_documented(expr: str, props: dict[str, str]) -> None:
    try:
        compiled = compile_sql92(expr)
    except SqlParseError:
        return
    try:
        assert compiled.evaluate(props) in (True, False, None)
    except EvalError:
        pass
    assert compiled.matches(props) in (True, False)


@pytest.mark.parametrize("depth", [1, 50, 400, 5000])
def test_deep_nesting_is_refused_or_parsed_never_a_crash(depth: int) -> None:
    for text in ("(" * depth + "a = 1" + ")" * depth, "NOT " * depth + "a", "- " * depth + "a > 1"):
        try:
            assert compile_sql92(text).matches({"a": "1"}) in (True, False)
        except SqlParseError:
            pass


# (expression, properties, Apache's answer): recorded from rocketmq-filter-5.3.3.jar
APACHE = [
    ("a = 1", {"a": "1"}, "TRUE"), ("a = 1", {"a": "x"}, "ERROR"), ("a > 'x'", {}, "PARSE_ERROR"),
    ("a STARTSWITH 'ab'", {"a": "abc"}, "TRUE"), ("NOT a", {"a": "true"}, "TRUE"), ("a", {"a": "true"}, "FALSE"),
    ("NULL", {}, "NULL"), ("TAGS IN ('a','b')", {"TAGS": "a"}, "TRUE"), ("a NOT IN ('x')", {}, "NULL"),
    ("a = TRUE", {"a": "true"}, "TRUE"), ("TRUE = a", {"a": "true"}, "ERROR"), ("a <> 1", {}, "NULL"),
    ("1 = 1", {}, "TRUE"), ("a BETWEEN 2 AND 1", {}, "PARSE_ERROR"), ("-a = -1", {"a": "1"}, "NULL"),
    ("a = 9223372036854775808", {"a": "1"}, "PARSE_ERROR"), ("a > 1.5", {"a": "2"}, "TRUE"),
    ("a > b", {"a": "2", "b": "10"}, "FALSE"), ("a = b", {"a": "2", "b": "2.0"}, "FALSE"),
    ("a IS NOT NULL AND b IS NULL", {"a": ""}, "TRUE"), ("a = 1 -- x", {"a": "1"}, "TRUE"),
    ("a NOT STARTSWITH ''", {"a": "x"}, "FALSE"), ("a=1L", {"a": "1"}, "TRUE"), ("a=.5e1", {"a": "5"}, "TRUE"),
    ("a > 1", {"a": " 2"}, "ERROR"), ("a = 1", {"a": "+1"}, "TRUE"), ("a > 1", {"a": "NaN"}, "ERROR"),
    ("a = 1 xyz", {"a": "1"}, "TRUE"), ("a = 1 #", {"a": "1"}, "PARSE_ERROR"), ("", {}, "PARSE_ERROR"),
    ("b = 1 OR a = 'x'", {"a": "x", "b": "z"}, "ERROR"), ("a = 'x' OR b = 1", {"a": "x", "b": "z"}, "TRUE"),
    ("a > 0.0", {"a": "1"}, "PARSE_ERROR"), ("a > 5", {"a": "3000000000"}, "ERROR"),
    ("a > 3000000000", {"a": "5"}, "FALSE"), ("a > 1.0", {"a": "1.1f"}, "TRUE"), ("a > 1.0", {"a": "\t2\n"}, "TRUE"),
    ("a > 1.0", {"a": "-Infinity"}, "FALSE"), ("a > 1.0", {"a": "infinity"}, "ERROR"), ("a = 1", {"a": "１"}, "TRUE"),
    ("a.b = 1", {"a.b": "1"}, "PARSE_ERROR"), ("$a = 1", {"$a": "1"}, "TRUE"), ("A = 1", {"a": "1"}, "NULL"),
    ("a = 'it''s'", {"a": "it's"}, "TRUE"), ("a IN (1)", {}, "PARSE_ERROR"), ("NOT a IN ('x')", {"a": "y"},
                                                                              "PARSE_ERROR"),
]


def answer(expr: str, props: dict[str, str]) -> str:
    try:
        compiled = compile_sql92(expr)
    except SqlParseError:
        return "PARSE_ERROR"
    try:
        return {True: "TRUE", False: "FALSE", None: "NULL"}[compiled.evaluate(props)]
    except EvalError:
        return "ERROR"


@pytest.mark.parametrize(("expr", "props", "apache"), APACHE)
def test_answers_recorded_from_apache(expr: str, props: dict[str, str], apache: str) -> None:
    assert answer(expr, props) == apache


def test_filters_of_a_subscription() -> None:
    msg = StoredMessage("T", 0, b"x", {"TAGS": "TagA", "n": "7"})
    assert accepts(compile_filter("TAG", "TagA || TagB", False), msg)
    assert not accepts(compile_filter("TAG", "TagB", False), msg)
    assert compile_filter("TAG", " * ", False) is None and compile_filter("", "", False) is None
    sql = compile_filter("SQL92", "n > 5 AND TAGS = 'TagA'", True)
    assert isinstance(sql, SqlFilter) and accepts(sql, msg)
    for kind, args in (("disabled", ("SQL92", "n > 5", False)), ("empty", ("SQL92", "  ", True)),
                       ("invalid", ("SQL92", "n >", True)), ("type", ("XPATH", "n", True))):
        with pytest.raises(FilterRefused) as err:
            compile_filter(*args)
        assert err.value.kind == kind


# queue of each FIFO message group on a topic of 4 write queues, as Apache RocketMQ 5.3.3's proxy chose it
APACHE_FIFO_QUEUES = {"ORDER_42": 2, "abc": 0, "g0": 0, "g1": 0, "g10": 2, "g11": 3, "g2": 3, "g3": 2, "g4": 1,
                      "g5": 2, "g6": 2, "g7": 0, "g8": 0, "g9": 2, "order-1": 3}


def test_fifo_group_queue_is_apaches() -> None:
    assert {g: group_queue(g, 4) for g in APACHE_FIFO_QUEUES} == APACHE_FIFO_QUEUES
    assert java_string_hash("abc") == 96354 and java_string_hash("\U0001F600") == 1772899  # UTF-16 code units
    assert java_string_hash("polygenelubricants") == -(1 << 31)


@given(key=st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1), buckets=st.integers(min_value=1, max_value=64))
def test_consistent_hash_moves_few_keys_when_a_bucket_is_added(key: int, buckets: int) -> None:
    a, b = consistent_hash(key, buckets), consistent_hash(key, buckets + 1)
    assert 0 <= a < buckets and b in (a, buckets)
