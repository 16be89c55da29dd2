"""Backend lifecycle against ``target``: the stand-in, or a real cluster when DISPATCH_KUBECONFIG
names one (see conftest.py). Only what needs no staged controller status is checked here."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

from kubeflow_support import Target
from tests.specs import parse_spec

from dispatch.backends.base import Submission
from dispatch.core.model import CauseKind, Provenance, State


def submission(target: Target, gated: bool = False, number: int = 0) -> Submission:
    job_id = f"lc-{uuid.uuid4().hex[:8]}"
    spec = parse_spec(
        {
            "name": "lifecycle",
            "command": ["python", "-c", "import time; time.sleep(600)"],
            "backend": "kubeflow",
            "nodes": 1,
            "kubeflow": {"namespace": target.namespace, "runtime": target.runtime},
        }
    )
    token = f"{job_id}.{number}"
    return Submission(job_id=job_id, number=number, token=token, spec=spec, gated=gated)


@contextlib.contextmanager
def submitted(target: Target, sub: Submission) -> Iterator[str]:
    ref = target.backend.submit(sub)
    try:
        yield ref
    finally:
        with contextlib.suppress(Exception):
            target.backend.cancel(ref)


def only(target: Target, tokens: list[str], refs: list[str]):  # type: ignore[no-untyped-def]
    found = target.backend.discover(tokens, refs)
    assert found.complete
    return found.objects


def settle_gone(target: Target, ref: str) -> None:
    """A real API server deletes asynchronously (foreground: after the pods): poll, bounded."""
    if not target.real:
        return
    for _ in range(60):
        if all(o.state is State.CANCELLED for o in only(target, [], [ref])):
            return
        time.sleep(2)


def test_submit_then_discover_by_token_and_by_ref(target: Target) -> None:
    sub = submission(target)
    with submitted(target, sub) as ref:
        (by_token,) = only(target, [sub.token], [])
        (by_ref,) = only(target, [], [ref])
        assert by_token.ref == by_ref.ref == ref
        assert by_token.token == sub.token
        assert by_token.alive and not by_token.gated


def test_repeated_submit_of_one_token_makes_one_object(target: Target) -> None:
    sub = submission(target)
    with submitted(target, sub) as ref:
        assert target.backend.submit(sub) == ref
        assert [o.ref for o in only(target, [sub.token], [])] == [ref]


def test_gated_submission_is_held_until_the_gate_opens(target: Target) -> None:
    sub = submission(target, gated=True)
    with submitted(target, sub) as ref:
        (held,) = only(target, [sub.token], [ref])
        assert held.gated
        assert held.state is State.HELD and held.cause.kind is CauseKind.HELD
        target.backend.open_gate(ref)
        (opened,) = only(target, [sub.token], [ref])
        assert not opened.gated
        if target.real:  # Trainer resumes the JobSet on its own time: its committed word
            for _ in range(60):
                if opened.state is not State.HELD:
                    break
                time.sleep(1)
                (opened,) = only(target, [sub.token], [ref])
        assert opened.state is not State.HELD


def test_trainjob_deleted_by_someone_else_is_cancelled_actor_unknown(target: Target) -> None:
    sub = submission(target)
    ref = target.backend.submit(sub)
    namespace, name = ref.split("/")
    if target.fake is not None:
        target.fake.remove("TrainJob", namespace, name)
    else:  # someone else: a second client, not the backend's own delete path
        from lightkube.types import CascadeType

        from dispatch.backends.kubeflow.client import ClientSettings, KubeClient, TrainJobRes

        other = KubeClient(ClientSettings(kubeconfig=target.backend._settings.kubeconfig))
        other.delete(TrainJobRes, namespace, name, cascade=CascadeType.BACKGROUND)
    settle_gone(target, ref)
    (gone,) = only(target, [sub.token], [ref])
    assert gone.state is State.CANCELLED
    assert gone.cause.kind is CauseKind.CANCELLED
    assert gone.cause.provenance is Provenance.ACTOR
    assert gone.cause.actor is None
    assert gone.token == sub.token


def test_our_own_cancel_names_dispatch(target: Target) -> None:
    sub = submission(target)
    ref = target.backend.submit(sub)
    target.backend.cancel(ref)
    target.backend.cancel(ref)  # a repeated cancel is not an error
    settle_gone(target, ref)
    (gone,) = only(target, [sub.token], [ref])
    assert gone.state is State.CANCELLED
    assert gone.cause.actor == "dispatch"
