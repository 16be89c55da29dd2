"""Issue 24: the HTTP API's ``{job}`` means what the CLI's JOB means (one resolution, in the
service): an id, a unique id prefix (4 characters or more), or a name, the newest job of its
supersede chain."""

from __future__ import annotations

from collections.abc import Callable

from serve_harness import Served, spec


def test_job_paths_take_prefixes_and_names_through_a_supersede(
        serve: Callable[..., Served]) -> None:
    s = serve()
    job = s.submit(spec("refs", "print('hi')"))
    s.wait_for(job, lambda st: st["settled"])
    assert s.client.get(f"/api/jobs/{job[:4]}").json()["job"] == job
    assert s.client.get("/api/jobs/refs/logs").text == "hi\n"
    short = s.client.get(f"/api/jobs/{job[:3]}")
    assert short.status_code == 404 and "at least 4 characters" in short.text
    # Superseded by name: the name then means the new job, for every path.
    r = s.post("/api/jobs/refs/supersede")
    assert r.status_code == 201, r.text
    new = r.json()["job"]
    assert r.json()["supersedes"] == job
    s.wait_for(new, lambda st: st["settled"])
    assert s.client.get("/api/jobs/refs").json()["job"] == new
    assert s.client.get("/api/jobs/refs/history").json()[0]["event"]["job_id"] == new
