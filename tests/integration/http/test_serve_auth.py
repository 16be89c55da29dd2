"""Who may use `dispatch serve`: no unauthenticated TCP mode. Over TCP a request needs the
per-start token (bearer, or a session cookie from /login) or a team token; over the Unix
socket only the server's own uid gets in (SO_PEERCRED). Checked against a real server from a
second real uid (`setpriv --reuid nobody`), and the token-file checks through the real CLI."""

from __future__ import annotations

import getpass
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
from serve_harness import WAIT_S, Served, cli, cli_env, spec

ANN = "ann-Zq7Lw2Rk9Xp4Tn6V"
BOB = "bob-Hc3Ym8Jd5Gs1Fb0N"
NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
PUBLIC = {"GET /login": 200, "GET /static/dashboard.css": 200, "GET /": 303,
          "GET /healthz": 200}


def token_file(tmp: Path, mode: int = 0o600) -> Path:
    path = tmp / "tokens"
    path.write_text(f"# name:token\nann:{ANN}\n\nbob:{BOB}\n")
    os.chmod(path, mode)
    return path


def routes(job: str) -> list[tuple[str, str]]:
    """Every route the server has, with a real job where one is named."""
    return [("GET", "/"), ("GET", "/login"), ("GET", "/static/dashboard.css"),
            ("GET", "/static/dashboard.js"), ("GET", "/static/index.html"),
            ("GET", "/metrics"), ("GET", "/healthz"), ("GET", "/api/supervisors"),
            ("GET", "/api/jobs"),
            ("GET", f"/api/jobs/{job}"), ("GET", f"/api/jobs/{job}/history"),
            ("GET", f"/api/jobs/{job}/timeline"), ("GET", f"/api/jobs/{job}/logs"),
            ("POST", "/api/jobs"), ("POST", f"/api/jobs/{job}/cancel"),
            ("POST", f"/api/jobs/{job}/resubmit"), ("POST", f"/api/jobs/{job}/give-up"),
            ("POST", f"/api/jobs/{job}/supersede")]


# Run as user nobody with the system's python and its standard library only.
AS_OTHER_UID = r"""
import http.client, json, socket, sys
port, sock_path, token_path, routes = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
out = {}
body = json.dumps({"name": "intruder", "command": ["id"]}).encode()
for method, path in routes:
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    c.request(method, path, body=body if method == "POST" else None,
              headers={"Content-Type": "application/json"} if method == "POST" else {})
    r = c.getresponse()
    out[method + " " + path] = r.status
    r.read()
    c.close()
try:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(sock_path)
    s.sendall(b"POST /api/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    out["unix"] = s.recv(200).decode() or "closed"
except OSError as e:
    out["unix"] = "errno %d" % e.errno
try:
    open(token_path).read()
    out["token file"] = "read"
except OSError as e:
    out["token file"] = "errno %d" % e.errno
print(json.dumps(out))
"""


def as_nobody(s: Served, job: str) -> dict[str, object]:
    done = subprocess.run([*NOBODY, "/usr/bin/python3", "-I", "-c", AS_OTHER_UID,
                           str(s.port), str(s.socket), str(s.token_file),
                           json.dumps(routes(job))],
                          capture_output=True, text=True, timeout=300, cwd="/")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_another_uid_gets_401_over_tcp_and_is_refused_on_the_socket(
        serve: Callable[..., Served]) -> None:
    s = serve()
    # the server's own uid, over the socket, without any token: acts as the server's user
    r = s.unix.post("/api/jobs", json=spec("mine", "import time; time.sleep(300)"))
    assert r.status_code == 201, r.text
    job = r.json()["job"]
    assert s.unix.get(f"/api/jobs/{job}/history").json()[0]["event"]["actor"] == \
        getpass.getuser()
    # let user nobody reach the directories above ours, so that ours is what refuses
    runtime = s.socket.parent.parent
    os.chmod(runtime, 0o755)
    os.chmod(s.token_file.parent, 0o755)
    assert stat.S_IMODE(s.socket.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(s.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(s.token_file.stat().st_mode) == 0o600

    seen = as_nobody(s, job)
    for method, path in routes(job):
        key = f"{method} {path}"
        assert seen[key] == PUBLIC.get(key, 401), (key, seen[key])
    assert seen["unix"] == "errno 13"  # EACCES: the 0700 directory
    assert seen["token file"] == "errno 13"

    # loosened by mistake: the kernel's word on the peer (SO_PEERCRED) still refuses
    os.chmod(s.socket.parent, 0o755)
    os.chmod(s.socket, 0o666)
    loose = as_nobody(s, job)
    # Closed, reset, or (a loaded machine: the server closed before the client's write)
    # a broken pipe: each is the refusal; what matters is the server's word below.
    assert loose["unix"] in ("closed", "errno 104", "errno 32"), loose["unix"]
    assert "refused: a Unix socket connection from uid 65534" in s.output()

    jobs = s.unix.get("/api/jobs", params={"all": "1"}).json()
    assert [j["job"] for j in jobs] == [job]  # nobody recorded nothing, cancelled nothing
    history = s.unix.get(f"/api/jobs/{job}/history").json()
    assert [h["type"] for h in history if "Requested" in h["type"]] == []
    assert "Traceback" not in s.output()


def test_the_start_token_is_printed_once_and_logs_a_browser_in(
        serve: Callable[..., Served]) -> None:
    s = serve()
    out = s.output()
    url = f"http://127.0.0.1:{s.port}/login?token={s.start_token}"
    assert out.count(s.start_token) == 1 and url in out
    anon = httpx2.Client(base_url=s.url, timeout=60)
    assert anon.get("/").headers["location"] == "/login"  # the dashboard sends one to log in
    login = anon.get("/login")
    assert login.status_code == 200 and 'action="/login"' in login.text
    wrong = anon.get("/login", params={"token": "not-the-token"})
    assert wrong.status_code == 401 and "not valid" in wrong.text
    assert not anon.cookies
    ok = anon.get("/login", params={"token": s.start_token})
    assert ok.status_code == 303 and ok.headers["location"] == "/"
    cookie = ok.headers["set-cookie"]
    name = f"dispatch_session_{s.port}"
    assert cookie.startswith(name + "=") and s.start_token not in cookie
    assert {"HttpOnly", "Path=/", "SameSite=strict"} <= {a.strip() for a in cookie.split(";")}
    assert anon.get("/").status_code == 200
    assert anon.get("/api/jobs").status_code == 200
    # a cookie POST from the page itself is fine; from another origin it is not (CSRF)
    same = anon.post("/api/jobs", json=spec("by-cookie", "pass"),
                     headers={"Origin": s.url})
    assert same.status_code == 201, same.text
    assert same.json()["job"]
    elsewhere = anon.post("/api/jobs", json=spec("csrf", "pass"),
                          headers={"Origin": "http://evil.test"})
    assert elsewhere.status_code == 403
    for headers in ({"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": "null", "Sec-Fetch-Site": "same-site"},
                    {"Origin": s.url, "Sec-Fetch-Site": "cross-site"}):
        assert anon.post("/api/jobs", json=spec("csrf", "pass"),
                         headers=headers).status_code == 403, headers
    # what a browser sends for the page's own POST under Referrer-Policy: no-referrer
    own = anon.post("/api/jobs", json=spec("own", "pass"),
                    headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"})
    assert own.status_code == 201, own.text
    forged = httpx2.get(s.url + "/api/jobs", cookies={name: "made-up-session-id"})
    assert forged.status_code == 401
    # the login page's form posts the token
    form = httpx2.post(s.url + "/login", data={"token": s.start_token})
    assert form.status_code == 303 and name in form.headers["set-cookie"]
    job = same.json()["job"]
    actor = s.client.get(f"/api/jobs/{job}/history").json()[0]["event"]["actor"]
    assert actor == getpass.getuser()
    anon.close()


def test_stopping_removes_the_token_and_the_socket(serve: Callable[..., Served]) -> None:
    s = serve()
    assert s.token_file.exists() and s.socket.exists()
    s.close()
    assert not s.token_file.exists() and not s.socket.exists()


def test_a_socket_left_by_a_killed_server_is_replaced(serve: Callable[..., Served]) -> None:
    first = serve()
    first.proc.kill()
    first.proc.wait(30)
    assert first.socket.exists()  # kill -9 leaves it
    again = serve(port=first.port)
    assert again.unix.get("/api/jobs").status_code == 200
    assert again.start_token != first.start_token


def test_without_a_runtime_dir_the_socket_is_in_the_state_dir(
        serve: Callable[..., Served], tmp_path: Path) -> None:
    s = serve(env={"XDG_RUNTIME_DIR": "relative/dir"})
    assert s.socket == tmp_path / "state" / "dispatch" / f"serve-{s.port}.sock"
    assert stat.S_IMODE(s.socket.parent.stat().st_mode) == 0o700
    assert s.unix.get("/api/jobs").status_code == 200
    assert not (tmp_path / "relative").exists()


def test_a_socket_path_too_long_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 100)
    deep.mkdir()
    env = {**cli_env(tmp_path), "XDG_RUNTIME_DIR": str(deep)}
    done = subprocess.run([sys.executable, "-m", "dispatch.cli", "serve", "--port", "0",
                           "--no-supervise"], env=env, cwd=tmp_path, text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 2 and "XDG_RUNTIME_DIR" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_team_token_name_is_the_actor(serve: Callable[..., Served], tmp_path: Path) -> None:
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
    # with team tokens the start token stays out of the output (a pod's log others read)
    assert s.start_token not in s.output() and str(s.token_file) in s.output()
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
    # a team token logs a browser in as its name
    login = anon.get("/login", params={"token": BOB})
    assert login.status_code == 303
    other = anon.post("/api/jobs", json=spec("bobs", "pass"))
    assert other.status_code == 201
    bobs = s.client.get(f"/api/jobs/{other.json()['job']}/history").json()
    assert bobs[0]["event"]["actor"] == "bob"
    anon.close()


def test_non_loopback_needs_a_token_file(tmp_path: Path) -> None:
    done = cli(tmp_path, "serve", "--host", "0.0.0.0", "--port", "1")
    assert done.returncode == 2
    assert "--token-file" in done.stderr


def refused(tmp_path: Path, path: Path) -> str:
    """`dispatch serve --token-file PATH` through the real CLI: exit 2, one line, no
    traceback, before it listens (port 1 would need root's bind; it never gets there)."""
    done = subprocess.run([sys.executable, "-m", "dispatch.cli", "serve", "--port", "1",
                           "--token-file", str(path)], env=cli_env(tmp_path), cwd=tmp_path,
                          text=True, capture_output=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: token file ")
    return done.stderr


def test_token_file_readable_by_others_or_a_link_is_refused(tmp_path: Path) -> None:
    assert "chmod 600" in refused(tmp_path, token_file(tmp_path, mode=0o644))
    assert "chmod 600" in refused(tmp_path, token_file(tmp_path, mode=0o640))
    link = tmp_path / "link"
    link.symlink_to(token_file(tmp_path))
    assert "cannot open" in refused(tmp_path, link)


def test_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = token_file(tmp_path)
    os.chown(path, 65534, 65534)  # user nobody's, mode 600
    assert "owned by uid 65534" in refused(tmp_path, path)


def test_token_file_that_is_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    assert "not a regular file" in refused(tmp_path, fifo)  # no writer: open must not block


def test_token_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(b"ann:\xff\xfe-0123456789abcdef\n")
    os.chmod(path, 0o600)
    assert "not UTF-8" in refused(tmp_path, path)


def _wait_for_line(s: Served, text: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while text not in s.output():
        assert time.monotonic() < deadline, s.output()
        time.sleep(0.1)
    return s.output()


def test_a_login_link_opened_from_another_site_is_refused(serve: Callable[..., Served]) -> None:
    """Issue 32 item 8, login CSRF: another site's page that sends the browser to
    /login?token=ATTACKERS would log it in as the attacker; the browser says where the
    request came from (Sec-Fetch-Site), and only the URL opened or pasted (none) or our own
    page (same-origin) exchange the token."""
    s = serve()
    for site in ("cross-site", "same-site"):
        anon = httpx2.Client(base_url=s.url, timeout=60)
        r = anon.get("/login", params={"token": s.start_token},
                     headers={"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate"})
        assert r.status_code == 403, (site, r.status_code)
        assert "set-cookie" not in r.headers and not anon.cookies
        assert "opened from another site" in r.text and 'action="/login"' in r.text
        assert anon.get("/api/jobs").status_code == 401
        anon.close()
    for site in ("none", "same-origin", None):  # opened or pasted; our page; curl
        headers = {} if site is None else {"Sec-Fetch-Site": site}
        ok = httpx2.get(s.url + "/login", params={"token": s.start_token}, headers=headers)
        assert ok.status_code == 303 and "set-cookie" in ok.headers, site
    _wait_for_line(s, "a login link opened from another site (Sec-Fetch-Site: cross-site)")


def test_failed_logins_are_logged_with_the_peer_rate_limited(
        serve: Callable[..., Served]) -> None:
    s = serve()
    began = time.monotonic()
    for _ in range(20):
        r = httpx2.get(s.url + "/login", params={"token": "not-the-token"})
        assert r.status_code == 401
        form = httpx2.post(s.url + "/login", data={"token": "nor-this-one"})
        assert form.status_code == 401
    took = time.monotonic() - began
    out = _wait_for_line(s, "refused: a login with a wrong token from 127.0.0.1:")
    # One line per 10 s (refusals.INTERVAL_S), each counting the refusals it stands for: 40
    # wrong tokens make one line on a quiet machine, one more for each 10 s a loaded one took.
    lines = [ln for ln in out.splitlines() if "a login with a wrong token" in ln]
    assert 1 <= len(lines) <= 1 + int(took // 10), (took, out)
    counted = sum(int(ln.split("(")[1].split()[0]) if " such since the last line)" in ln
                  else 1 for ln in lines)
    assert counted <= 40, out
    assert "Traceback" not in out


def test_a_guessable_team_token_is_refused_saying_how_to_make_one(tmp_path: Path) -> None:
    for token in ("a" * 16, "0123456789abcdef", "ab" * 10):
        path = tmp_path / "tokens"
        path.write_text(f"ann:{ANN}\nbob:{token}\n")
        os.chmod(path, 0o600)
        said = refused(tmp_path, path)
        assert "line 2" in said and "'bob'" in said and "easy to guess" in said, said
        assert "secrets.token_urlsafe" in said and token not in said


def test_an_ipv6_loopback_host_without_a_port_is_served(serve: Callable[..., Served]) -> None:
    s = serve()
    for host in ("[::1]", f"[::1]:{s.port}", "localhost", f"127.0.0.1:{s.port}"):
        r = s.client.get("/api/jobs", headers={"Host": host})
        assert r.status_code == 200, (host, r.text)
    for host in ("[::1]evil.test", "evil.test", "[::1", f"evil.test:{s.port}"):
        r = s.client.get("/api/jobs", headers={"Host": host})
        assert r.status_code == 403, (host, r.text)
