"""Writing a batch script to disk: the one file of a Slurm submission that holds the job's
environment (its secrets among it)."""

from __future__ import annotations

from pathlib import Path

from dispatch.support.files import write_atomic


def write_script(path: Path, script: str) -> None:
    """Write a batch script: it holds the job's environment (secrets among it), so 0600, and
    the directory dispatch makes for it 0700 (the job's output files land there too, written
    by slurmstepd as the same user). sbatch reads the script as the submitting user and sends
    its text to slurmctld, so nobody else ever needs to read it. A directory that exists is
    left as it is (it may be a shared one the spec names): the file's own mode guards it.
    A fresh temp name (O_EXCL | O_NOFOLLOW), synced, renamed: a link planted in the output
    directory is replaced, never followed."""
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.parent.mkdir(mode=0o700)
    except FileExistsError:
        pass
    write_atomic(path, script.encode(), mode=0o600)
