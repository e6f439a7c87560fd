"""The name server (mqnamesrv): which brokers are alive and which queues each topic has."""
