"""Where ``dispatch serve`` listens and what it leaves for its own user to find:

- the TCP address asked for (``--host``/``--port``);
- a Unix socket ``serve-PORT.sock`` in a directory of this user's alone (mode 0700): under
  ``$XDG_RUNTIME_DIR/dispatch``, or the state dir when that is unset or relative. The
  socket is 0600 and http/protocol.py checks each peer's uid besides;
- the per-start token in ``serve-PORT.token`` (0600) in the state dir, for scripts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from dispatch.errors import BadInput
from dispatch.http.auth import write_secret_file
from dispatch.support.paths import state_home

SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with its NUL


def runtime_dir() -> Path:
    """The directory for the socket: ``$XDG_RUNTIME_DIR/dispatch`` when that is absolute,
    else the state dir."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    return Path(xdg) / "dispatch" if os.path.isabs(xdg) else state_home()


def private_dir(path: Path) -> Path:
    """``path`` as a directory of this user's that no one else can enter (made 0700 when
    missing; one that is a link, another user's or open to others is refused)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{path}: not a directory (a link or a file is not used for the socket)")
    if st.st_uid != os.getuid():
        raise BadInput(f"{path}: owned by uid {st.st_uid}, not by this user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700, follow_symlinks=False)
    return path


def socket_path(port: int) -> Path:
    return runtime_dir() / f"serve-{port}.sock"


def token_path(port: int) -> Path:
    return state_home() / f"serve-{port}.token"


def bind_tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as err:
        sock.close()
        raise BadInput(f"cannot listen on {host}:{port}: {err.strerror}") from None
    sock.set_inheritable(True)
    return sock


def bind_unix(path: Path) -> socket.socket:
    """A 0600 listening socket at ``path`` in its private directory. A socket file left by
    a server that is gone (nothing answers on it) is replaced; a live one is refused."""
    private_dir(path.parent)
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise BadInput(f"the socket path {path} is longer than {SUN_PATH_MAX} bytes; set "
                       "XDG_RUNTIME_DIR to a shorter directory")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(str(path))
        except OSError as err:
            if err.errno != errno.EADDRINUSE or _answers(path):
                raise BadInput(f"cannot listen on {path}: {err.strerror} (another "
                               "dispatch serve on this port?)") from None
            path.unlink()
            sock.bind(str(path))
        os.chmod(path, 0o600)  # the directory is 0700: no one else could reach it meanwhile
    except BaseException:
        sock.close()
        raise
    return sock


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


@dataclass
class Listeners:
    tcp: socket.socket
    unix: socket.socket
    port: int
    socket_path: Path
    token_path: Path

    def close(self) -> None:
        for sock in (self.tcp, self.unix):
            sock.close()
        for path in (self.socket_path, self.token_path):
            with contextlib.suppress(OSError):
                path.unlink()


def listen(host: str, port: int, start_token: str) -> Listeners:
    tcp = bind_tcp(host, port)
    bound = int(tcp.getsockname()[1])
    unix_path = socket_path(bound)
    try:
        unix = bind_unix(unix_path)
    except BaseException:
        tcp.close()
        raise
    listeners = Listeners(tcp, unix, bound, unix_path, token_path(bound))
    try:
        write_secret_file(listeners.token_path, start_token + "\n")
    except OSError as err:
        listeners.close()
        raise BadInput(f"cannot write {listeners.token_path}: {err.strerror}") from None
    except BaseException:
        listeners.close()
        raise
    return listeners
