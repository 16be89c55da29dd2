"""A scheduler's refused reads as data (issue 47 item 4): stored as strict JSON, shown in the
notes of the unfinished jobs of the scope, and joined with the leases and the presence rows
into what ``dispatch supervisors`` shows. Pure."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from dispatch.core.refusals import Refusal, RefusalsInvalid, decode, encode, refusal_notes
from dispatch.stores.fence import Lease
from dispatch.stores.presence import Presence
from dispatch.supervise.presence import supervisors_view

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
NODES = Refusal("Node in cluster", "list", '403 Forbidden: nodes is forbidden: User "u" '
                "cannot list resource", "a lost node is seen only through its pods' "
                "conditions", T0)
PODS = Refusal("Pod in team-a", "watch", "403 Forbidden: pods", "no job moves", T0)


def test_refusals_round_trip_and_an_unchanged_list_is_the_same_text() -> None:
    assert decode(encode([PODS, NODES])) == [NODES, PODS]
    assert encode([PODS, NODES]) == encode([NODES, PODS])
    assert decode(encode([])) == []


@pytest.mark.parametrize(("text", "said"), [
    ("nope", "not JSON"),
    ('{"resource": "x"}', "expected a list"),
    ('[{"resource": "x"}]', "refusals[0]: expected an object with the fields"),
    ('[{"resource": 1, "verb": "", "words": "", "cost": "", "since": ""}]',
     "refusals[0]: every field must be a string"),
    ('[{"resource": "r", "verb": "", "words": "", "cost": "", "since": "yesterday"}]',
     "refusals[0].since: not an ISO 8601 time"),
    ('[{"resource": "r", "verb": "", "words": "", "cost": "", "since": "2026-12-07T09:00"}]',
     "refusals[0].since: no time zone"),
])
def test_a_stored_list_that_does_not_decode_is_refused_naming_what(text: str,
                                                                   said: str) -> None:
    with pytest.raises(RefusalsInvalid, match=said.replace("[", r"\[").replace("]", r"\]")):
        decode(text)


def test_an_unfinished_job_is_told_each_refused_read_a_finished_one_nothing() -> None:
    notes = refusal_notes([PODS, NODES], backend="kubeflow", terminal=False)
    assert notes == [
        "the kubeflow scheduler refuses `list Node in cluster` to the supervisor's identity "
        "since 2026-12-07 09:00:00 UTC (403 Forbidden: nodes is forbidden: User \"u\" cannot "
        "list resource): a lost node is seen only through its pods' conditions; see "
        "`dispatch doctor --backend kubeflow`",
        "the kubeflow scheduler refuses `watch Pod in team-a` to the supervisor's identity "
        "since 2026-12-07 09:00:00 UTC (403 Forbidden: pods): no job moves; see "
        "`dispatch doctor --backend kubeflow`"]
    assert refusal_notes([PODS, NODES], backend="kubeflow", terminal=True) == []
    assert refusal_notes([], backend="kubeflow", terminal=False) == []


def _lease(scope: str, holder: str, *, active: bool = True) -> Lease:
    return Lease(scope=scope, holder=holder, epoch=3, period_s=15.0, acquired_at=T0,
                 expires_at=T0 + timedelta(seconds=15 if active else -1), last_tick_at=T0,
                 released_at=None, now=T0 + timedelta(seconds=1))


def _row(scope: str, holder: str, role: str, refusals: str = "[]",
         since: datetime = T0) -> Presence:
    return Presence(scope, holder, role, T0, since, T0, T0 + timedelta(seconds=20),  # type: ignore[arg-type]
                    refusals, T0)


def test_supervisors_view_lists_standbys_and_the_active_ones_refusals() -> None:
    rows = supervisors_view(
        [_lease("kubeflow:c/ns", "h:1"), _lease("local:h", "h:1")], Counter({"local:h": 2}),
        [_row("kubeflow:c/ns", "h:1", "active", encode([NODES])),
         _row("kubeflow:c/ns", "h:2", "standby"),
         _row("kubeflow:c/ns", "h:3", "standby", since=T0 + timedelta(seconds=5)),
         # A row still saying standby for the holder that has just taken the lease: not a
         # standby; an active row of another holder (killed, not stale yet): not shown.
         _row("local:h", "h:1", "standby"), _row("local:h", "h:9", "active", encode([PODS])),
         _row("slurm:x", "h:4", "standby")])
    by = {r["scope"]: r for r in rows}
    assert [s["holder"] for s in by["kubeflow:c/ns"]["standbys"]] == ["h:2", "h:3"]
    assert by["kubeflow:c/ns"]["standbys"][1] == {
        "holder": "h:3", "started": T0.isoformat(),
        "since": (T0 + timedelta(seconds=5)).isoformat(), "seen": T0.isoformat()}
    assert by["kubeflow:c/ns"]["refusals"] == [NODES.to_json()]
    assert by["local:h"]["standbys"] == [] and by["local:h"]["refusals"] == []
    assert by["local:h"]["live_jobs"] == 2
    # A scope with a standby and no lease row: listed, unserved.
    assert (by["slurm:x"]["state"], [s["holder"] for s in by["slurm:x"]["standbys"]]) == (
        "unserved", ["h:4"])


def test_an_unreadable_refusals_row_is_shown_as_such_never_a_traceback() -> None:
    [row] = supervisors_view([_lease("k", "h:1")], Counter(),
                             [_row("k", "h:1", "active", "{oops")])
    assert row["refusals"][0]["words"].startswith("unreadable: refusals: not JSON")


def test_an_expired_lease_has_no_active_holder_to_be_refused() -> None:
    [row] = supervisors_view([_lease("k", "h:1", active=False)], Counter(),
                             [_row("k", "h:1", "active", encode([NODES]))])
    assert row["state"] == "expired" and row["refusals"] == []
