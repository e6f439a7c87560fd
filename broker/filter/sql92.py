"""RocketMQ's SQL92 message filter: parser and evaluator, answering exactly as Apache RocketMQ 5.3.3 does.

RocketMQ's filter module (a JavaCC grammar derived from ActiveMQ's JMS selectors) defines the
language; this module reproduces its observable behaviour, checked case by case against Apache's
own rocketmq-filter-5.3.3.jar (tests/test_sql92_oracle.py runs the jar on hypothesis-generated
expressions and properties and compares every answer).  What a user meets:

* comparisons ``= <> < <= > >=``, ``BETWEEN``/``NOT BETWEEN``, ``IN``/``NOT IN`` (string lists),
  ``IS NULL``/``IS NOT NULL``, ``AND``/``OR``/``NOT``, ``CONTAINS``/``STARTSWITH``/``ENDSWITH`` and
  their ``NOT`` forms, string literals (``'it''s'``), integer (``10``, ``10L``) and floating
  literals, ``TRUE``/``FALSE``/``NULL``, unary ``+``/``-``, ``--`` and ``/* */`` comments;
* property names are case-sensitive identifiers (``[a-zA-Z_$][a-zA-Z0-9_$]*``); ``TAGS`` is the
  message's tag, like any other stored property;
* properties are strings, converted to the literal's type when compared (``a > 5`` parses ``a`` as
  a Java int); a value that does not convert makes the evaluation fail, and the message does not
  match;
* three-valued logic: a missing property makes comparisons NULL, which never matches.

Why a hand-written parser and not a grammar library (lark, pyparsing): RocketMQ's JavaCC parser
reads tokens lazily and stops after the longest valid expression, so ``a = 1 garbage`` is accepted
(the rest is never read) while ``a = 1 #`` is refused (the lexer reads the token after ``1``).  A
grammar library parses the whole input and would refuse the first and differ on which lexical
errors count.  A recursive-descent parser with one production per rule of RocketMQ's grammar and a
lazy tokenizer reproduces both, and its behaviour is pinned by the differential fuzz test against
Apache's jar rather than by reading the grammar.

Evaluation follows RocketMQ's ExpressionMessageFilter: a message matches only when the expression
evaluates to TRUE; NULL, FALSE and an evaluation error do not match.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DOUBLE_MAX = 1.7976931348623157e308
DOUBLE_MIN = 5e-324  # Java's Double.MIN_VALUE: the smallest positive double


class SqlParseError(ValueError):
    """The expression is not valid RocketMQ SQL92 (RocketMQ: MQFilterException, "Invalid MessageSelector")."""


class EvalError(Exception):
    """Evaluation failed (RocketMQ: an exception inside evaluate()); the message does not match."""


class JLong(int):
    """A Java long value (an int literal beyond Java's int range): strings compared with it parse as a long."""


# ----------------------------------------------------------------------------------- tokens
KEYWORDS = ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH")
_KEYWORDS = frozenset(KEYWORDS)
_WS = " \t\n\r\f"
_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOAT = re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")
_ID = re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*")
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")

Token = tuple[str, Any]  # (kind, value): kind is a keyword, an operator, "INT", "FLOAT", "STRING", "ID" or "EOF"


class _Lexer:
    """Tokens on demand, so a lexical error is raised only when the parser reads that far (like JavaCC)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.buffer: list[Token] = []

    def peek(self, k: int = 1) -> Token:
        while len(self.buffer) < k:
            self.buffer.append(self._next())
        return self.buffer[k - 1]

    def kind(self, k: int = 1) -> str:
        return self.peek(k)[0]

    def take(self) -> Token:
        tok = self.peek()
        self.buffer.pop(0)
        return tok

    def _skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in _WS:
                self.pos += 1
            elif text.startswith("--", self.pos):
                # a line comment ends with a line break; without one "--" is two minus signs
                end = min((i for i in (text.find("\n", self.pos), text.find("\r", self.pos)) if i >= 0), default=-1)
                if end < 0:
                    return
                self.pos = end + (2 if text.startswith("\r\n", end) else 1)
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise SqlParseError(f"unterminated comment at column {self.pos + 1}")
                self.pos = end + 2
            else:
                return

    def _next(self) -> Token:
        self._skip()
        text, pos = self.text, self.pos
        if pos >= len(text):
            return ("EOF", None)
        c = text[pos]
        if c == "'":
            i, out = pos + 1, []
            while True:
                j = text.find("'", i)
                if j < 0:
                    raise SqlParseError(f"unterminated string literal at column {pos + 1}")
                out.append(text[i:j])
                if text.startswith("''", j):
                    out.append("'")
                    i = j + 2
                    continue
                self.pos = j + 1
                return ("STRING", "".join(out))
        # longest match among the literal and name tokens (JavaCC's rule); a keyword wins a tie with a name
        candidates = []
        for kind, rx in (("FLOAT", _FLOAT), ("INT", _DECIMAL), ("ID", _ID)):
            m = rx.match(text, pos)
            if m:
                candidates.append((m.end() - pos, kind, m.group()))
        if candidates:
            length, kind, image = max(candidates, key=lambda t: t[0])
            self.pos = pos + length
            if kind == "ID" and image.upper() in _KEYWORDS:
                return (image.upper(), image)
            return (kind, image)
        for op in _OPERATORS:
            if text.startswith(op, pos):
                self.pos = pos + len(op)
                return (op, op)
        raise SqlParseError(f"unexpected character {c!r} at column {pos + 1}")


# ------------------------------------------------------------------------------ java values
_JAVA_INT = re.compile(r"[+-]?\d+")
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_JAVA_HEX_DOUBLE = re.compile(r"([+-]?)(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?")


def _java_int(s: str, lo: int, hi: int) -> int:
    """Integer.valueOf / Long.valueOf: an optional sign and decimal digits, nothing else."""
    if not _JAVA_INT.fullmatch(s):
        raise EvalError(f"{s!r} is not a number")
    v = int(s)
    if not lo <= v <= hi:
        raise EvalError(f"{s!r} is out of range")
    return v


def _java_double(s: str) -> float:
    """Double.valueOf: trims characters up to U+0020, accepts NaN, Infinity, hex floats and a f/d suffix."""
    i, j = 0, len(s)
    while i < j and s[i] <= " ":
        i += 1
    while j > i and s[j - 1] <= " ":
        j -= 1
    t = s[i:j]
    if _JAVA_DOUBLE.fullmatch(t):
        body = t.rstrip("fFdD") if t[-1:] in "fFdD" and "Infinity" not in t else t
        if body.lstrip("+-") == "NaN":
            return math.nan
        if body.lstrip("+-") == "Infinity":
            return -math.inf if body.startswith("-") else math.inf
        return float(body)
    m = _JAVA_HEX_DOUBLE.fullmatch(t)
    if m:
        v = float.fromhex(m.group(2))
        return -v if m.group(1) == "-" else v
    raise EvalError(f"{s!r} is not a number")


def _double_cmp(a: float, b: float) -> int:
    """Double.compare: NaN above everything (and equal to itself), -0.0 below 0.0."""
    an, bn = math.isnan(a), math.isnan(b)
    if an or bn:
        return (an > bn) - (an < bn)
    if a < b:
        return -1
    if a > b:
        return 1
    sa, sb = math.copysign(1.0, a) < 0, math.copysign(1.0, b) < 0
    return (sb > sa) - (sb < sa)


def _jkind(v: Any) -> str:
    if v.__class__ is bool:
        return "B"
    if v.__class__ is str:
        return "S"
    if v.__class__ is float:
        return "D"
    if v.__class__ is JLong:
        return "L"
    return "I"


def _str_as(kind: str, s: str) -> Any:
    if kind == "B":
        return s.lower() == "true"
    if kind == "I":
        return _java_int(s, INT_MIN, INT_MAX)
    if kind == "L":
        return _java_int(s, LONG_MIN, LONG_MAX)
    return _java_double(s)


def java_compare(lv: Any, rv: Any) -> int:
    """RocketMQ's ComparisonExpression.__compare: convert the two values to a common type, then compareTo.

    Values of unrelated types compare as -1 (less); a string that does not convert raises EvalError;
    a Boolean compared with a string fails the way RocketMQ's (a ClassCastException).
    """
    lk, rk = _jkind(lv), _jkind(rv)
    if lk != rk:
        if lk == "B":
            if rk == "S":
                raise EvalError("a boolean cannot be compared with a string")
            return -1
        if lk == "S":
            lv, lk = _str_as(rk, lv), rk
        elif rk == "S":
            rv, rk = _str_as(lk, rv), lk
        elif rk == "B":
            return -1
        elif lk == "D" or rk == "D":
            lv, rv, lk = float(lv), float(rv), "D"
    if lk == "D":
        return _double_cmp(lv, rv)
    return (lv > rv) - (lv < rv)


# ------------------------------------------------------------------------------- expressions
Props = Mapping[str, str]
Node = Callable[[Props], Any]


class Expr:
    """A compiled node: ``ev(props)`` returns str, int, JLong, float, bool or None, or raises EvalError."""

    boolean = False  # a BooleanExpression in RocketMQ's terms
    constant = False
    prop: str | None = None
    value: Any = None

    def __init__(self, ev: Node, *, boolean: bool = False) -> None:
        self.ev = ev
        self.boolean = boolean


class Const(Expr):
    constant = True

    def __init__(self, value: Any) -> None:
        super().__init__(lambda _p: value, boolean=value is None or value.__class__ is bool)
        self.value = value


class Prop(Expr):
    def __init__(self, name: str) -> None:
        super().__init__(lambda p: p.get(name))
        self.prop = name


def _bool_cast(e: Expr) -> Expr:
    def ev(p: Props) -> Any:
        v = e.ev(p)
        if v is None:
            return None
        return v if v.__class__ is bool else False
    return Expr(ev, boolean=True)


def _as_boolean(e: Expr) -> Expr:
    if e.boolean:
        return e
    if e.prop is not None:
        return _bool_cast(e)
    raise SqlParseError("expression will not result in a boolean value")


def _not(e: Expr) -> Expr:
    f = e.ev

    def ev(p: Props) -> Any:
        v = f(p)
        return None if v is None else not v
    return Expr(ev, boolean=True)


def _and(a: Expr, b: Expr) -> Expr:
    fa, fb = a.ev, b.ev

    def ev(p: Props) -> Any:
        lv = fa(p)
        if lv is False:
            return False
        rv = fb(p)
        if rv is False:
            return False
        return None if lv is None or rv is None else True
    return Expr(ev, boolean=True)


def _or(a: Expr, b: Expr) -> Expr:
    fa, fb = a.ev, b.ev

    def ev(p: Props) -> Any:
        lv = fa(p)
        if lv is True:
            return True
        rv = fb(p)
        if rv is True:
            return True
        return None if lv is None or rv is None else False
    return Expr(ev, boolean=True)


def _negate(e: Expr) -> Expr:
    f = e.ev

    def ev(p: Props) -> Any:
        v = f(p)
        if v is None or v.__class__ in (bool, str):
            return None
        if v.__class__ is JLong:
            return JLong(-v)
        return -v
    return Expr(ev)


def _equal_node(a: Expr, b: Expr) -> Expr:
    fa, fb = a.ev, b.ev
    prop, const = a.prop, b.value

    if prop is not None and b.constant and const.__class__ is str:
        # the common case (a property against a string literal), without the general conversion
        def ev_fast(p: Props) -> Any:
            v = p.get(prop)
            return None if v is None else v == const
        return Expr(ev_fast, boolean=True)

    def ev(p: Props) -> Any:
        lv, rv = fa(p), fb(p)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return java_compare(lv, rv) == 0
    return Expr(ev, boolean=True)


def _check_equal_operands(a: Expr, b: Expr) -> None:
    for e in (a, b):
        if e.constant and e.value is None:
            raise SqlParseError("NULL cannot be compared with = or <>; use IS NULL")
    if a.constant and b.constant and a.boolean and not b.boolean:
        raise SqlParseError("a boolean literal cannot be compared with a non-boolean literal")


def _check_less_than_operand(e: Expr) -> None:
    if e.constant:
        if e.value is None or e.value.__class__ in (bool, str):
            raise SqlParseError("only numbers can be compared with <, <=, > or >=")
    elif e.boolean:
        raise SqlParseError("a condition cannot be compared with <, <=, > or >=")


_ORDER = {"<": lambda c: c < 0, "<=": lambda c: c <= 0, ">": lambda c: c > 0, ">=": lambda c: c >= 0}


def _order(op: str, a: Expr, b: Expr) -> Expr:
    _check_less_than_operand(a)
    _check_less_than_operand(b)
    fa, fb, test = a.ev, b.ev, _ORDER[op]

    def ev(p: Props) -> Any:
        lv = fa(p)
        if lv is None:
            return None
        rv = fb(p)
        if rv is None:
            return None
        if lv.__class__ is str and rv.__class__ is str:
            return test(_double_cmp(_java_double(lv), _java_double(rv)))
        return test(java_compare(lv, rv))
    return Expr(ev, boolean=True)


_STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": lambda v, s: s in v, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}


def _string_test(op: str, e: Expr, search: str, negated: bool) -> Expr:
    f, test = e.ev, _STRING_TESTS[op]

    def ev(p: Props) -> Any:
        if not search:
            return False
        v = f(p)
        if v is None or v.__class__ is not str:
            return False
        return test(v, search) != negated
    return Expr(ev, boolean=True)


def _in(e: Expr, items: list[str], negated: bool) -> Expr:
    if e.prop is None:
        raise SqlParseError("IN needs a property on its left")
    prop, values = e.prop, frozenset(items)

    def ev(p: Props) -> Any:
        v = p.get(prop)
        if v is None:
            return None
        return (v in values) != negated
    return Expr(ev, boolean=True)


# ------------------------------------------------------------------------------------ parser
class _Parser:
    """One method per production of RocketMQ's grammar, peeking tokens where JavaCC's generated parser does."""

    def __init__(self, text: str) -> None:
        self.lx = _Lexer(text)

    def expect(self, kind: str) -> Token:
        tok = self.lx.take()
        if tok[0] != kind:
            raise SqlParseError(f"expected {kind} but found {tok[1] if tok[0] != 'EOF' else 'the end'}")
        return tok

    def selector(self) -> Expr:
        return _as_boolean(self.or_expr())

    def or_expr(self) -> Expr:
        left = self.and_expr()
        while self.lx.kind() == "OR":
            self.lx.take()
            right = self.and_expr()
            left = _or(_as_boolean(left), _as_boolean(right))
        return left

    def and_expr(self) -> Expr:
        left = self.equality()
        while self.lx.kind() == "AND":
            self.lx.take()
            right = self.equality()
            left = _and(_as_boolean(left), _as_boolean(right))
        return left

    def equality(self) -> Expr:
        left = self.comparison()
        while True:
            k = self.lx.kind()
            if k == "=" or k == "<>":
                self.lx.take()
                right = self.comparison()
                _check_equal_operands(left, right)
                eq = _equal_node(left, right)
                left = eq if k == "=" else _not(eq)
            elif k == "IS":
                if self.lx.kind(2) == "NULL":
                    self.lx.take()
                    self.lx.take()
                    left = _equal_node(left, Const(None))
                else:
                    self.lx.take()
                    self.expect("NOT")
                    self.expect("NULL")
                    left = _not(_equal_node(left, Const(None)))
            else:
                return left

    def comparison(self) -> Expr:
        left = self.unary()
        while True:
            k = self.lx.kind()
            if k in _ORDER:
                self.lx.take()
                left = _order(k, left, self.unary())
            elif k in _STRING_TESTS:
                self.lx.take()
                left = _string_test(k, left, self.string(), False)
            elif k == "BETWEEN":
                self.lx.take()
                left = self.between(left, False)
            elif k == "IN":
                self.lx.take()
                left = _in(left, self.string_list(), False)
            elif k == "NOT":
                k2 = self.lx.kind(2)
                if k2 in _STRING_TESTS:
                    self.lx.take()
                    self.lx.take()
                    left = _string_test(k2, left, self.string(), True)
                elif k2 == "BETWEEN":
                    self.lx.take()
                    self.lx.take()
                    left = self.between(left, True)
                elif k2 == "IN":
                    self.lx.take()
                    self.lx.take()
                    left = _in(left, self.string_list(), True)
                else:
                    raise SqlParseError(f"NOT must be followed by CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN "
                                        f"here, not {self.lx.peek(2)[1] or 'the end'}")
            else:
                return left

    def between(self, value: Expr, negated: bool) -> Expr:
        low = self.unary()
        self.expect("AND")
        high = self.unary()
        if negated:
            return _or(_order("<", value, low), _order(">", value, high))
        if low.constant and high.constant:
            if low.value is None or high.value is None:
                raise SqlParseError("BETWEEN bounds cannot be NULL")
            try:
                if java_compare(high.value, low.value) < 0:
                    raise SqlParseError(f"BETWEEN's low bound {low.value} is above its high bound {high.value}")
            except EvalError as exc:
                raise SqlParseError(f"BETWEEN bounds cannot be compared: {exc}") from None
        return _and(_order(">=", value, low), _order("<=", value, high))

    def string(self) -> str:
        return str(self.expect("STRING")[1])

    def string_list(self) -> list[str]:
        self.expect("(")
        items = [self.string()]
        while self.lx.kind() == ",":
            self.lx.take()
            items.append(self.string())
        self.expect(")")
        return items

    def unary(self) -> Expr:
        k = self.lx.kind()
        if k == "+":
            self.lx.take()
            return self.unary()
        if k == "-":
            self.lx.take()
            return _negate(self.unary())
        if k == "NOT":
            self.lx.take()
            return _not(_as_boolean(self.unary()))
        return self.primary()

    def primary(self) -> Expr:
        kind, image = self.lx.take()
        if kind == "STRING":
            return Const(image)
        if kind == "INT":
            text = image[:-1] if image[-1] in "lL" else image
            v = int(text)
            if v > LONG_MAX:
                raise SqlParseError(f"{image} is beyond the range of a long")
            return Const(v if v <= INT_MAX else JLong(v))
        if kind == "FLOAT":
            d = float(image)
            if d > DOUBLE_MAX:
                raise SqlParseError(f"{image} is greater than the largest double")
            if d < DOUBLE_MIN:
                raise SqlParseError(f"{image} is less than the smallest positive double")
            return Const(d)
        if kind == "TRUE":
            return Const(True)
        if kind == "FALSE":
            return Const(False)
        if kind == "NULL":
            return Const(None)
        if kind == "ID":
            return Prop(image)
        if kind == "(":
            inner = self.or_expr()
            self.expect(")")
            return inner
        raise SqlParseError(f"unexpected {image if kind != 'EOF' else 'end of expression'}")


class SqlExpression:
    """A compiled SQL92 filter. ``evaluate`` gives RocketMQ's three-valued answer; ``matches`` its filter decision."""

    __slots__ = ("_ev", "text")

    def __init__(self, text: str, root: Expr) -> None:
        self.text = text
        self._ev = root.ev

    def evaluate(self, props: Props) -> bool | None:
        """TRUE, FALSE or NULL (None); raises EvalError where RocketMQ's evaluate() throws."""
        return self._ev(props)  # type: ignore[no-any-return]

    def matches(self, props: Props) -> bool:
        try:
            return self._ev(props) is True
        except EvalError:
            return False
        except (TypeError, ValueError, OverflowError, RecursionError):
            return False

    def __repr__(self) -> str:
        return f"SqlExpression({self.text!r})"


def compile_sql92(text: str) -> SqlExpression:
    """Parse ``text``; raises SqlParseError (whose message says why) where RocketMQ would refuse it."""
    try:
        root = _Parser(text).selector()
    except SqlParseError:
        raise
    except (RecursionError, ValueError, OverflowError) as exc:
        raise SqlParseError(str(exc) or exc.__class__.__name__) from None
    return SqlExpression(text, root)
