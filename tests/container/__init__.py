"""The image, really built and run (opt-in: scripts/container-test)."""
