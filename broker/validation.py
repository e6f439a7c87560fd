"""Request validation for the client-facing gRPC protocol (the gRPC front door's own checks).

Every check raises RequestError (broker/grpc_errors.py) with the RocketMQ v2 status code a
client of the official SDK expects and a message that names the offending field, so a bad
request is answered, never crashes a handler, and never reaches the store.  The remoting door
checks its frames' headers itself (broker/remoting/); the rules both share (topic and group
names, filters) live in the core (broker/topics.py, broker/groups.py, broker/filter/).
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from .convert import RESERVED_PROPERTIES
from .filter import SQL92, TAG, FilterProblem, FilterRefused, MessageFilter, compile_filter
from .groups import group_name_problem
from .grpc_errors import RequestError
from .topics import topic_name_problem

Code = pb.Code
MAX_TAG_LENGTH = 128
MAX_MESSAGE_GROUP_LENGTH = 64
MAX_USER_PROPERTIES_BYTES = 16 * 1024
MAX_USER_PROPERTIES = 128
MAX_KEY_LENGTH = 128


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def check_topic(name: str, field: str = "topic.name") -> None:
    problem = topic_name_problem(name)
    if problem:
        raise RequestError(Code.ILLEGAL_TOPIC, f"{field}: {problem}")


def check_group(name: str, field: str = "group.name") -> None:
    problem = group_name_problem(name)
    if problem:
        raise RequestError(Code.ILLEGAL_CONSUMER_GROUP, f"{field}: {problem}")


def check_message(msg: pb.Message, max_body: int, index: int) -> None:
    where = f"messages[{index}]"
    check_topic(msg.topic.name, f"{where}.topic.name")
    sp = msg.system_properties
    if not sp.message_id:
        raise RequestError(Code.ILLEGAL_MESSAGE_ID, f"{where}.system_properties.message_id is empty")
    if len(sp.message_id) > 128 or _has_control(sp.message_id):
        raise RequestError(Code.ILLEGAL_MESSAGE_ID, f"{where}.system_properties.message_id is malformed")
    if not msg.body:
        raise RequestError(Code.MESSAGE_BODY_EMPTY, f"{where}.body is empty")
    if len(msg.body) > max_body:
        raise RequestError(Code.MESSAGE_BODY_TOO_LARGE,
                           f"{where}.body is {len(msg.body)} bytes, more than maxMessageSize {max_body}")
    if sp.tag and (not sp.tag.strip() or "|" in sp.tag or _has_control(sp.tag) or len(sp.tag) > MAX_TAG_LENGTH):
        raise RequestError(Code.ILLEGAL_MESSAGE_TAG,
                           f"{where}.system_properties.tag {sp.tag[:40]!r} is blank, too long, or contains '|' "
                           "or control characters")
    for key in sp.keys:
        if not key.strip() or _has_control(key) or " " in key or len(key) > MAX_KEY_LENGTH:
            raise RequestError(Code.ILLEGAL_MESSAGE_KEY,
                               f"{where}.system_properties.keys has an illegal key {key[:40]!r} (blank, too long, "
                               "or with spaces or control characters)")
    if sp.message_group and (len(sp.message_group) > MAX_MESSAGE_GROUP_LENGTH or _has_control(sp.message_group)):
        raise RequestError(Code.ILLEGAL_MESSAGE_GROUP,
                           f"{where}.system_properties.message_group is longer than {MAX_MESSAGE_GROUP_LENGTH} "
                           "or has control characters")
    if sp.message_type == pb.FIFO and not sp.message_group:
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                           f"{where}: a FIFO message needs system_properties.message_group")
    if sp.message_group and sp.message_type not in (pb.FIFO, pb.MESSAGE_TYPE_UNSPECIFIED):
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                           f"{where}: message_group is only allowed on FIFO messages")
    if len(msg.user_properties) > MAX_USER_PROPERTIES:
        raise RequestError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                           f"{where}.user_properties has more than {MAX_USER_PROPERTIES} entries")
    size = 0
    for k, v in msg.user_properties.items():
        if not k or k in RESERVED_PROPERTIES or _has_control(k) or "\x01" in v or "\x02" in v:
            raise RequestError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                               f"{where}.user_properties key {k[:40]!r} is reserved, empty or has control characters")
        size += len(k.encode()) + len(v.encode())
    if size > MAX_USER_PROPERTIES_BYTES:
        raise RequestError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                           f"{where}.user_properties are {size} bytes, more than {MAX_USER_PROPERTIES_BYTES}")


def grpc_expression_type(expr: pb.FilterExpression) -> str:
    """RocketMQ's ExpressionType name of a v2 FilterExpression (FILTER_TYPE_UNSPECIFIED is TAG, as the proxy)."""
    return SQL92 if expr.type == pb.SQL else TAG


def parse_filter(expr: pb.FilterExpression, property_filter_enabled: bool) -> MessageFilter:
    """The filter of a v2 FilterExpression: None (every message), a tag set, or a SQL92 filter.

    Codes as Apache RocketMQ 5.3.3's proxy answers them where it has one (a blank SQL92 expression:
    ILLEGAL_FILTER_EXPRESSION "Expression can't be null! SQL92"); an invalid SQL92 expression is
    ILLEGAL_FILTER_EXPRESSION naming the expression (Apache's proxy: INTERNAL_SERVER_ERROR,
    docs/COMPATIBILITY.md); SQL92 while the broker's enablePropertyFilter is false is UNSUPPORTED.
    """
    try:
        return compile_filter(grpc_expression_type(expr), expr.expression, property_filter_enabled)
    except FilterRefused as exc:
        code = Code.UNSUPPORTED if exc.kind is FilterProblem.DISABLED else Code.ILLEGAL_FILTER_EXPRESSION
        # Apache's own text for a blank expression; the others name the field
        message = exc.message if exc.kind is FilterProblem.EMPTY else f"filter_expression: {exc.message}"
        raise RequestError(code, message) from None


def parse_tag_filter(expr: pb.FilterExpression) -> MessageFilter:
    """The filter of a ReceiveMessage (RocketMQ's POP): SQL92 is evaluated whatever enablePropertyFilter says,
    as Apache RocketMQ 5.3.3's PopMessageProcessor does (only PULL checks the key; docs/COMPATIBILITY.md)."""
    return parse_filter(expr, True)
