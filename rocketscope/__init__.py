"""RocketScope."""
