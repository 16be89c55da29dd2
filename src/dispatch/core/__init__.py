"""The functional core: the vocabulary (model, events, policy, spec), the strict codec, and the
pure functions that compute a job's state and what to do next (record.fold, status.project,
decide.decide, story). Nothing here does I/O or reads a clock: time is passed in. An import
contract (pyproject.toml [tool.importlinter], run by scripts/test) keeps it so."""
