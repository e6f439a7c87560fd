"""Hypothesis strategies for RocketMQ SQL92 filter expressions and message properties.

Shared by the parser fuzz test (tests/test_sql92.py) and the differential test against Apache's own
filter jar (tests/test_sql92_oracle.py).  Expressions are built from the grammar's pieces, with
enough near-misses (bad literals, stray tokens, comments, case changes) to reach the error paths.
"""

from __future__ import annotations

from hypothesis import strategies as st

NAMES = ["a", "b", "TAGS", "A", "$x", "_y", "k1"]
INTS = ["0", "1", "5", "10L", "007", "2147483647", "2147483648", "9223372036854775807", "9223372036854775808"]
FLOATS = ["1.5", "0.0", "1e3", ".5", ".5e1", "1e999", "5.", "1E+2", "1e-400", "0.1", "2.0"]
STRINGS = ["'x'", "'1'", "'true'", "''", "'it''s'", "'1.0'", "'TagA'", "'a b'", "'é'", "'x"]
VALUES = ["1", "2", "10", "-1", "1.0", "1.5", "x", "", "true", "TRUE", "false", "2147483648", "9223372036854775808",
          " 2", "2 ", "NaN", "Infinity", "-0", "-0.0", "1e3", "0x10", "1.5f", "TagA", "it's", "+1", "١", "a b"]
JUNK = ["(", ")", ",", "NOT", "AND", "OR", "IS", "IN", "--", "--x\n", "/* c */", "/*", "#", "!", "==", "!=", "'",
        "- -1", "+", "BETWEEN", "NULL", "x y", ".", "1.2.3", "0x1F", "1L", "\t", "\n", "and", "or", "not"]

literal = st.sampled_from(INTS + FLOATS + STRINGS + ["TRUE", "FALSE", "NULL", "true", "null"])
name = st.sampled_from(NAMES)
operand = st.one_of(name, literal, name.map(lambda n: f"-{n}"), literal.map(lambda v: f"-{v}"),
                    literal.map(lambda v: f"+{v}"))


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    bin_ops = st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "AND", "OR", "and", "or"])
    return st.one_of(
        st.tuples(children, bin_ops, children).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        children.map(lambda c: f"({c})"),
        children.map(lambda c: f"NOT {c}"),
        st.tuples(children, st.sampled_from(["IS NULL", "IS NOT NULL", "is null"])).map(lambda t: f"{t[0]} {t[1]}"),
        st.tuples(children, st.sampled_from(["", "NOT "]), operand, operand).map(
            lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
        st.tuples(children, st.sampled_from(["", "NOT "]), st.lists(st.sampled_from(STRINGS), min_size=1,
                                                                     max_size=3)).map(
            lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"),
        st.tuples(children, st.sampled_from(["", "NOT "]), st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]),
                  st.sampled_from(STRINGS)).map(lambda t: f"{t[0]} {t[1]}{t[2]} {t[3]}"),
    )


structured = st.recursive(operand, _combine, max_leaves=8)
noisy = st.tuples(structured, st.sampled_from(JUNK), st.integers(min_value=0, max_value=3)).map(
    lambda t: [f"{t[0]} {t[1]}", f"{t[1]} {t[0]}", f"{t[0]}{t[1]}", t[0].replace(" ", t[1], 1)][t[2]])
token_soup = st.lists(st.one_of(st.sampled_from(JUNK), operand, st.sampled_from(["=", "<", ">", "<>"])),
                      max_size=8).map(" ".join)
# conditions a user would write: mostly valid, so evaluation (not only parsing) is compared
cmp_op = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])
num = st.sampled_from([i for i in INTS if i != "007"] + ["1.5", "1e3", ".5", "5.", "2.0"]).flatmap(
    lambda v: st.sampled_from([v, f"-{v}"]))
leaf = st.one_of(
    st.tuples(name, cmp_op, st.one_of(num, st.sampled_from([*STRINGS[:-1], "TRUE", "FALSE"]))).map(" ".join),
    st.tuples(num, cmp_op, name).map(" ".join),
    st.tuples(name, cmp_op, name).map(" ".join),
    st.tuples(name, st.sampled_from(["", "NOT "]), num, num).map(lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
    st.tuples(name, st.sampled_from(["", "NOT "]), st.lists(st.sampled_from([*STRINGS[:-1], "'1'", "'TagA'"]),
                                                             min_size=1, max_size=4)).map(
        lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"),
    st.tuples(name, st.sampled_from(["", "NOT "]), st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]),
              st.sampled_from(STRINGS[:-1])).map(lambda t: f"{t[0]} {t[1]}{t[2]} {t[3]}"),
    st.tuples(name, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
    name, st.sampled_from(["TRUE", "FALSE", "NULL"]),
)
conditions = st.recursive(leaf, lambda c: st.one_of(
    st.tuples(c, st.sampled_from(["AND", "OR"]), c).map(" ".join), c.map(lambda x: f"({x})"),
    c.map(lambda x: f"NOT ({x})"), st.tuples(c, st.sampled_from(["=", "<>"]), st.sampled_from(["TRUE", "FALSE"])).map(
        lambda t: f"({t[0]}) {t[1]} {t[2]}")), max_leaves=6)

expressions = st.one_of(conditions, conditions, conditions, structured, noisy, token_soup, st.text(max_size=12))
properties = st.dictionaries(name, st.sampled_from(VALUES), max_size=4) | st.fixed_dictionaries(
    {}, optional={n: st.sampled_from(VALUES) for n in ("a", "b", "TAGS")})
