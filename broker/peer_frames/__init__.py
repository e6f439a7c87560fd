"""Framed peer ports over plain TCP or TLS, shared by DLedger's Raft port and Master/Slave replication."""
