"""Issue 39: the failpoints are a closed set armed by the environment only; every call site
names a known point; an unknown name is refused naming the known ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dispatch.core import events as ev
from dispatch.support import failpoints

SRC = Path(failpoints.__file__).parent.parent  # the whole package: support/ is one floor down


def test_off_unless_the_environment_arms_them() -> None:
    assert failpoints.ARMED == frozenset()  # the test process arms none
    failpoints.hit("acted:submit")  # a no-op when not armed


def test_parse_takes_known_names_and_refuses_others() -> None:
    assert failpoints.parse(" acted:stop, lease:renewed ,") == {"acted:stop", "lease:renewed"}
    assert failpoints.parse("") == frozenset()
    with pytest.raises(failpoints.UnknownFailpoint) as err:
        failpoints.parse("acted:stop,acted:teleport")
    assert "'acted:teleport'" in str(err.value)
    assert all(name in str(err.value) for name in failpoints.KNOWN)


def test_every_call_site_names_a_known_point() -> None:
    sites = set()
    for path in SRC.rglob("*.py"):
        sites |= set(re.findall(r'fp\.hit\("([^"]+)"\)', path.read_text()))
    assert sites, "no call site found"
    assert sites <= failpoints.KNOWN, sites - failpoints.KNOWN
    assert {"acted:submit", "acted:stop", "acted:cancel", "acted:open-gate",
            "acted:publish-segment", "gate:opening", "local-submit:staged",
            "lease:renewing", "lease:renewed"} <= sites


def test_every_appended_point_is_an_event() -> None:
    for name in failpoints.KNOWN:
        if name.startswith("appended:"):
            assert isinstance(getattr(ev, name.partition(":")[2], None), type), name


def test_each_backend_declares_how_long_a_submit_can_stay_in_flight(tmp_path: Path) -> None:
    """Issue 39 item 3: the wait after a takeover is the backend's own bound."""
    from datetime import timedelta

    from dispatch.backends.kubeflow import KubeflowBackend
    from dispatch.backends.local import LocalBackend
    from dispatch.backends.slurm.backend import SlurmBackend

    assert LocalBackend(tmp_path / "root").submit_in_flight == timedelta(0)
    assert SlurmBackend(timeout=20.0).submit_in_flight == timedelta(seconds=20)
    assert KubeflowBackend(timeout_s=7.0, informer=False).submit_in_flight \
        == timedelta(seconds=7)
