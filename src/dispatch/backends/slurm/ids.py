"""Slurm's compact id notations: node lists (``n[1-3,5]``) and array task strings
(``0-15%4``, ``123_[0-3]``). Pure functions of text; malformed text raises ValueError naming it."""

from __future__ import annotations

from collections.abc import Iterator

# ---------------------------------------------------------------------------------- nodelists


def expand_nodelist(text: str) -> tuple[str, ...]:
    """``n[1-3,5],gpu7`` -> (n1, n2, n3, n5, gpu7). Malformed -> ValueError."""
    text = text.strip()
    if not text or text in ("(null)", "None assigned"):
        return ()
    return tuple(_expand(text))


def _split_top(text: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ] in node list {text!r}")
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    if depth != 0:
        raise ValueError(f"unbalanced [ in node list {text!r}")
    yield text[start:]


def _expand(text: str) -> Iterator[str]:
    for part in _split_top(text):
        if not part:
            raise ValueError(f"empty name in node list {text!r}")
        if "[" not in part:
            yield part
            continue
        prefix, _, rest = part.partition("[")
        body, _, suffix = rest.partition("]")
        if "[" in suffix or "]" in suffix:
            raise ValueError(f"nested ranges in node list {text!r}")
        for item in body.split(","):
            lo, dash, hi = item.partition("-")
            if not lo.isdigit() or (dash and not hi.isdigit()):
                raise ValueError(f"bad range {item!r} in node list {text!r}")
            if not dash:
                yield f"{prefix}{lo}{suffix}"
                continue
            if int(hi) < int(lo) or int(hi) - int(lo) > 100_000:
                raise ValueError(f"bad range {item!r} in node list {text!r}")
            width = len(lo)
            for n in range(int(lo), int(hi) + 1):
                yield f"{prefix}{n:0{width}d}{suffix}"


# ---------------------------------------------------------------------------------- arrays

MAX_ARRAY_TASK_ID = 4_000_000  # Slurm's hard ceiling on MaxArraySize


def expand_array_tasks(text: str) -> tuple[str, ...]:
    """An array's task string -> its task ids, in order: ``0-3`` -> (0, 1, 2, 3); also
    ``1,3,5``, ``0-7:2`` (a step), ``0-15%4`` (a throttle, dropped) and sacct's pending form
    ``[0-1]``. Malformed -> ValueError naming the text."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    body, _, throttle = body.partition("%")
    if throttle and (not throttle.isdigit() or int(throttle) < 1):
        raise ValueError(f"bad throttle in array task string {text!r}")
    if not body:
        raise ValueError(f"empty array task string {text!r}")
    out: list[str] = []
    seen: set[int] = set()
    for item in body.split(","):
        span, colon, step_s = item.partition(":")
        lo_s, dash, hi_s = span.partition("-")
        if not lo_s.isdigit() or (dash and not hi_s.isdigit()) \
                or (colon and (not dash or not step_s.isdigit() or int(step_s) < 1)):
            raise ValueError(f"bad item {item!r} in array task string {text!r}")
        lo = int(lo_s)
        hi = int(hi_s) if dash else lo
        if hi < lo or hi > MAX_ARRAY_TASK_ID:
            raise ValueError(f"bad range {item!r} in array task string {text!r}")
        for n in range(lo, hi + 1, int(step_s) if colon else 1):
            if n not in seen:
                seen.add(n)
                out.append(str(n))
    return tuple(out)


def array_task_of(job_id: str) -> tuple[str, str] | None:
    """sacct's ``JobID`` of an array row -> (array job id, task text): ``123_4.batch`` ->
    (123, 4); ``123_[0-3]`` (tasks not yet started) -> (123, [0-3]). None for other jobs."""
    head = job_id.split(".", 1)[0]
    array_id, sep, task = head.partition("_")
    if not sep or not array_id.isdigit() or not task:
        return None
    return array_id, task
