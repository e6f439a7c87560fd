"""Message trace: RocketMQ's trace record format and what RocketScope builds on it.

One module per job, imported by their full names (``rocketscope.trace.codec`` ...), so
that reading a trace body does not pull in the Elasticsearch client or a thread:

* ``codec``: the ``\\x01``/``\\x02`` text format, record types, tolerant decoder;
* ``ids``: RocketMQ's offsetMsgId (store host + commit-log offset);
* ``batching``: records to bounded trace messages with their KEYS;
* ``dispatcher``: the background sender that never blocks the traced send;
* ``timeline``: one message's whole life from its records and replication events;
* ``elasticsearch_store``: the optional Elasticsearch backend;
* ``client_trace``: client-side trace for the official Python client
  (``rocketscope.trace.instrument(client)``, imported lazily below).

docs/TRACE.md describes the format, the rules and the limits.
"""


def instrument(client, trace_topic=None, **kwargs):  # type: ignore[no-untyped-def]
    """Trace an official-client Producer, SimpleConsumer or PushConsumer (see ``trace/client_trace.py``)."""
    from rocketscope.trace.client_trace import instrument as _instrument

    return _instrument(client, trace_topic, **kwargs)
