"""Issue 17: a submission after a segment-health exclusion asks Slurm to avoid the excluded
nodes: one ``--exclude`` in the sbatch argv, merged with the spec's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatch.backends.base import Submission
from dispatch.backends.slurm.script import render
from dispatch.core.spec import JobSpec, SpecError


def sub(exclude_nodes: tuple[str, ...] = (), **slurm: object) -> Submission:
    spec = JobSpec(name="train", command=("python", "train.py"), backend="slurm", nodes=2,
                   slurm=dict(slurm))
    return Submission(job_id="j1", number=2, token="j1.2", spec=spec,
                      exclude_nodes=exclude_nodes)


def excludes(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--exclude")]


@pytest.mark.parametrize(("nodes", "slurm", "want"), [
    ((), {}, []),
    (("n3",), {}, ["--exclude=n3"]),
    (("n2", "n3"), {}, ["--exclude=n2,n3"]),
    (("n3",), {"exclude": "n1"}, ["--exclude=n1,n3"]),
    (("n1", "n3"), {"exclude": "n1"}, ["--exclude=n1,n3"]),  # each node once
    ((), {"exclude": "n[1-2]"}, ["--exclude=n[1-2]"]),
    (("n3",), {"extra": ["--exclude=n4", "--mail-type=END"]}, ["--exclude=n4,n3"]),
    (("n3",), {"exclude": "n1", "extra": ["--exclude=n4"]}, ["--exclude=n1,n4,n3"]),
])
def test_one_exclude_merged(tmp_path: Path, nodes: tuple[str, ...], slurm: dict[str, object],
                            want: list[str]) -> None:
    _, argv = render(sub(nodes, **slurm), out_dir=tmp_path)
    assert excludes(argv) == want
    assert argv[-1].endswith(".sbatch")  # the script is still last
    if "extra" in slurm:
        assert "--mail-type=END" in argv or "--mail-type=END" not in slurm["extra"]  # type: ignore[operator]


def test_a_node_name_that_is_not_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="exclude_nodes"):
        render(sub(("n1,n2",)), out_dir=tmp_path)
    with pytest.raises(SpecError, match="exclude_nodes"):
        render(sub(("-n1",)), out_dir=tmp_path)
