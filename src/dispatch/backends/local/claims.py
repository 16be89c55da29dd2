"""One submit of a token at a time, across processes: ``<root>/claims/<hash of the token>``.

A local submit looks for an object carrying its token, then stages and publishes one. Two
supervisors doing that at once for the same token (a stopped one resumed after the other took
its scope over: SIGSTOP, a frozen VM) would publish two objects for one submission. The
claim is an ``flock`` held from the look to the publish: the kernel drops it when its holder
dies, so a dead submitter's claim is free at once, while a stopped one keeps it and the other
supervisor retries on a later tick (``SubmitInFlight``) until the holder resumes and
publishes, or dies. The file is removed once the token's object is published: whoever takes
a claim after that finds the object and binds it, whatever file it locked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from dispatch.backends.local.root import check_trusted_folder
from dispatch.backends.local.wire import CLAIMS
from dispatch.core.model import SchedulerUnreachable


class SubmitInFlight(SchedulerUnreachable):
    """Another live process is submitting this token now; the intent stays and is retried."""


def claim_path(root: Path, token: str) -> Path:
    # Hashed: a token is the record's word, not a file name this directory should trust.
    return root / CLAIMS / hashlib.sha256(token.encode()).hexdigest()[:40]


@contextlib.contextmanager
def submit_claim(root: Path, token: str) -> Iterator[Path]:
    """Hold ``token``'s claim for the body; ``SubmitInFlight`` when a live process holds it.
    Yields the claim's path (the body removes it once the object is published)."""
    path = claim_path(root, token)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
    except OSError as err:
        raise SchedulerUnreachable(
            "local", f"cannot make {path.parent}: {err.strerror or err}") from None
    check_trusted_folder(root, path.parent)  # made by us, not laid out by another user
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise SchedulerUnreachable(
            "local", f"cannot open the submit claim {path}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise SchedulerUnreachable(
                    "local", f"cannot lock the submit claim {path}: {err.strerror}") from None
            raise SubmitInFlight(
                "local", f"another process is submitting this job now (it holds {path}); "
                "retried on the next tick") from None
        yield path
    finally:
        os.close(fd)  # releases the lock


def release_published(path: Path) -> None:
    """The token's object is published: its claim file is no longer needed (see above)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
