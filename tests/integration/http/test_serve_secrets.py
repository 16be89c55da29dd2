"""Issue 21 items 4 and 17 over HTTP: the API shows env names, never values, and refuses
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


def test_a_lone_surrogate_in_a_request_is_400_not_500(serve: Callable[..., Served]) -> None:
    """Issue 21 item 17 over HTTP: JSON may spell a lone surrogate (\\ud800); it is refused
    at validation, naming the field, and nothing is recorded."""
    s = serve()
    for body, where in ((b'{"name": "a\\ud800", "command": ["true"]}', "name"),
                        (b'{"name": "a", "command": ["echo", "\\udc80"]}', "command[1]"),
                        (b'{"name": "a", "command": ["true"], "env": {"A": "\\ud800"}}',
                         "env.A")):
        r = s.client.post("/api/jobs", content=body,
                          headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "bad-input" and f"{where}: holds a lone surrogate" in error[
            "message"]
    assert s.client.get("/api/jobs", params={"all": "1"}).json() == []
