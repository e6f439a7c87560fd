"""Controller mode: a Raft group of controllers that elects masters, and its broker side."""
