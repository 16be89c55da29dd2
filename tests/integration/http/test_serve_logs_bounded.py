"""Issue 21 item 3 over HTTP: `GET /api/jobs/J/logs` of a job that wrote 200 MB is streamed
by a real `dispatch serve` without holding it (the server's resident memory stays within
100 MB of where it was), and `?tail=N` gives exactly the last N lines."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psutil
from serve_harness import Served, spec

LINE = "x" * 99 + "\n"
BLOCKS = 2000  # blocks of 1000 lines: 200 MB
BIG = ("import sys\n"
       f"block = {LINE.encode()!r} * 1000\n"
       "w = sys.stdout.buffer.write\n"
       f"for i in range({BLOCKS}): w(block)\n"
       "print('the last line')\n")
BIG_BYTES = len(LINE) * 1000 * BLOCKS + len("the last line\n")
MOST_GROWTH = 100 * 1024 * 1024
FIRST_BYTES_S = 10.0  # generous on a shared machine: the old server read all 200 MB first


class PeakRSS:
    """Samples a process's resident memory every 20 ms from a thread, keeping the peak."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = self.proc.memory_info().rss
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.wait(0.02):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return self.peak


def test_a_big_log_is_streamed_in_bounded_memory_and_tail_reads_its_end(
        serve: Callable[..., Served]) -> None:
    served = serve()
    job = served.submit(spec("big", BIG))
    served.wait_for(job, lambda s: s["state"] == "succeeded")

    before = psutil.Process(served.proc.pid).memory_info().rss
    sampler = PeakRSS(served.proc.pid)
    started = time.monotonic()
    first_at: float | None = None
    count = 0
    end = b""
    try:
        with served.client.stream("GET", f"/api/jobs/{job}/logs") as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/plain")
            for chunk in r.iter_bytes():
                if first_at is None and chunk:
                    first_at = time.monotonic() - started
                count += len(chunk)
                end = (end + chunk)[-100:]
    finally:
        peak = sampler.stop()
    assert count == BIG_BYTES
    assert end.endswith(b"x\nthe last line\n")
    assert peak - before < MOST_GROWTH, (
        f"serve grew by {(peak - before) / 2**20:.0f} MiB for one log request")
    assert first_at is not None and first_at < FIRST_BYTES_S

    r = served.client.get(f"/api/jobs/{job}/logs", params={"tail": "2"})
    assert r.status_code == 200
    assert r.text == LINE + "the last line\n"
    assert served.client.get(f"/api/jobs/{job}/logs", params={"tail": "0"}).text == ""
    followed = served.client.get(f"/api/jobs/{job}/logs", params={"tail": "1", "follow": "1"})
    assert followed.text == "the last line\n"  # the job has ended: following ends at once
    for bad in ("-1", "x", "1.5"):
        r = served.client.get(f"/api/jobs/{job}/logs", params={"tail": bad})
        assert r.status_code == 400, (bad, r.text)
        assert "tail" in r.json()["error"]["message"]
    r = served.client.get(f"/api/jobs/{job}/logs", params={"submission": "9"})
    assert r.status_code == 404  # an error before any output is a status, not a line
