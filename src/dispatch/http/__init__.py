"""``dispatch serve``: the supervisor loop, a JSON API mirroring the Python API, Prometheus
metrics and a web dashboard, in one process (app.py, server.py)."""
