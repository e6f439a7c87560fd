"""RocketMQ's classic TCP "remoting" protocol on the name server and the broker (docs/REMOTING.md).

``codec`` holds frames, headers and the stored-message encoding; ``server`` the asyncio
server (and the first-bytes sniffer that lets one port serve remoting and gRPC);
``namesrv`` and ``broker`` the request handlers, which call the same route table and
broker core the gRPC services use.
"""
