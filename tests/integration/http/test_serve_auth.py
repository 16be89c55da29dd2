"""Tokens: a non-loopback address needs a token file; requests without the bearer token get
401; a person request is recorded with the token's name as the actor."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx2
from serve_harness import Served, cli, spec

ANN = "ann-0123456789abcdef"
BOB = "bob-0123456789abcdef"


def token_file(tmp: Path, mode: int = 0o600) -> Path:
    path = tmp / "tokens"
    path.write_text(f"# name:token\nann:{ANN}\n\nbob:{BOB}\n")
    os.chmod(path, mode)
    return path


def test_bearer_token_required_and_its_name_is_the_actor(serve: Callable[..., Served],
                                                          tmp_path: Path) -> None:
    s = serve("--token-file", str(token_file(tmp_path)), token=ANN)
    anon = httpx2.Client(base_url=s.url, timeout=30)
    for method, path in (("GET", "/api/jobs"), ("GET", "/metrics"),
                         ("POST", "/api/jobs"), ("GET", "/api/jobs/x/history")):
        r = anon.request(method, path, json={})
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"]["code"] == "unauthorized"
    wrong = anon.get("/api/jobs", headers={"Authorization": "Bearer not-a-token-at-all"})
    assert wrong.status_code == 401
    assert anon.get("/").status_code == 200  # the page itself holds no data: it asks for one
    job = s.submit(spec("guarded", "import time; time.sleep(120)"))
    s.wait_for(job, lambda st: st["state"] == "running")
    as_bob = anon.post(f"/api/jobs/{job}/cancel", json={},
                       headers={"Authorization": f"Bearer {BOB}"})
    assert as_bob.status_code == 200
    history = s.client.get(f"/api/jobs/{job}/history").json()
    created = history[0]["event"]
    assert created["actor"] == "ann"
    cancels = [h["event"] for h in history if h["type"] == "CancelRequested"]
    assert [c["actor"] for c in cancels] == ["bob"]
    done = s.wait_for(job, lambda st: st["settled"])
    assert done["state"] == "cancelled" and done["cause"]["actor"] == "bob"
    anon.close()


def test_non_loopback_needs_a_token_file(tmp_path: Path) -> None:
    done = cli(tmp_path, "serve", "--host", "0.0.0.0", "--port", "1")
    assert done.returncode == 2
    assert "--token-file" in done.stderr


def test_token_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = token_file(tmp_path, mode=0o644)
    done = cli(tmp_path, "serve", "--port", "1", "--token-file", str(path))
    assert done.returncode == 2
    assert "chmod 600" in done.stderr
    link = tmp_path / "link"
    link.symlink_to(token_file(tmp_path))
    done = cli(tmp_path, "serve", "--port", "1", "--token-file", str(link))
    assert done.returncode == 2 and "cannot open" in done.stderr
