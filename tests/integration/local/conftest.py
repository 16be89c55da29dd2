from local_harness import local  # noqa: F401  (the fixture every test here uses)
