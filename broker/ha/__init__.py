"""High-availability layers: replication events, Master/Slave, DLedger, controller."""
