"""Issue 21 item 3 for pod logs: one read of a pod's log stops at its size bound and says
there is more (``LogRead.more``), so a long log is followed in pieces, never held whole; the
follower reads on at once and gives every line once, and ``tail`` keeps only the last lines."""

from __future__ import annotations

import pytest
from test_kubeflow_logs import running  # noqa: F401  (the fixture below uses it)

from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.backends.kubeflow.podlogs import PodLog
from dispatch.service.logs import LogTail
from kube_fake import FakeApiServer

LINES = [f"line {i:04d}" for i in range(400)]


@pytest.fixture
def long_log(fake: FakeApiServer, backend: KubeflowBackend,
             running: tuple[str, list[str]]) -> PodLog:  # noqa: F811
    ref, pods = running
    ns = ref.split("/")[0]
    for i, line in enumerate(LINES):
        fake.write_log(ns, pods[0], line + "\n", at=f"2026-03-01T10:{i // 60:02d}:{i % 60:02d}Z")
    return PodLog(backend.kube, ns, pods[0], "uid", "node", limit_bytes=200, read_bytes=500)


def test_a_read_stops_at_its_bound_and_says_there_is_more(long_log: PodLog) -> None:
    got = long_log.read(None, final=False)
    assert got.more
    assert 500 <= len(got.data) < 500 + 200  # the page that passed the bound, no more
    assert got.data.decode().splitlines() == LINES[:len(got.data.decode().splitlines())]


def test_the_follower_reads_every_piece_once(long_log: PodLog) -> None:
    tail = LogTail()
    text = "".join(tail.read([long_log], final=True))
    assert text.splitlines() == LINES
    assert "".join(tail.read([long_log], final=True)) == ""  # nothing twice


def test_tail_keeps_only_the_last_lines_of_a_long_pod_log(long_log: PodLog) -> None:
    tail = LogTail()
    tail.tail = 3
    assert "".join(tail.read([long_log], final=True)).splitlines() == LINES[-3:]
