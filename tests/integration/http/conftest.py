from serve_harness import serve  # noqa: F401  (the fixture every test here uses)
