from api_harness import env  # noqa: F401  (the fixture every test here uses)
