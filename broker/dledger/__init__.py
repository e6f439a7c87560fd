"""DLedger mode: the commit log replicated by the shared Raft core (broker/raft)."""
