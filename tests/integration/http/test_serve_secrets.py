"""Issue 21 item 4 over HTTP: the API shows env names, never values, and refuses
env_from_host (a request does not carry the submitter's environment, and the server's own is
not the submitter's)."""

from __future__ import annotations

from collections.abc import Callable

from serve_harness import Served

SECRET = "hf_http_s3cr3t_987654321"


def test_the_api_shows_env_names_never_values(serve: Callable[..., Served]) -> None:
    s = serve()
    job = s.submit({"name": "envy", "command": ["true"], "env": {"HF_TOKEN": SECRET}})
    s.wait_for(job, lambda st: st["settled"])
    for path in (f"/api/jobs/{job}", f"/api/jobs/{job}/history", "/api/jobs?all=1"):
        r = s.client.get(path)
        assert r.status_code == 200, r.text
        assert SECRET not in r.text, path
    created = s.client.get(f"/api/jobs/{job}/history").json()[0]["event"]
    assert created["spec"]["env"] == {"HF_TOKEN": "<hidden>"}


def test_env_from_host_is_refused_over_http(serve: Callable[..., Served]) -> None:
    s = serve(env={"HF_TOKEN": SECRET})  # the server has it; the client asked for its own
    r = s.post("/api/jobs", {"name": "x", "command": ["true"], "env_from_host": ["HF_TOKEN"]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "bad-input" and "env_from_host" in error["message"]
    assert s.client.get("/api/jobs", params={"all": "1"}).json() == []
