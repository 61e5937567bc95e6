"""What several test modules share: the tiny model's fixtures live in ``tests/integration/conftest.py``;
samplers, stores, rollout waits and processes here, one of each."""
