"""Agent-lightning 1.x: its ``agl-server`` REST store for the rollout-store port (plain HTTP, no 1.x import),
the Python 3.12 environment it runs in, and the server and local controller a run starts from it."""
