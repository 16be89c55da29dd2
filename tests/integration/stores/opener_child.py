"""A process that opens record stores as every command does (open_store), driven by
tests/integration/stores/test_setup_race.py (argv only, URLs on stdin).

    opener_child.py     prints "ready", then for each URL line read on stdin opens that
                        store (setting it up when it is new), closes it and prints "ok", or
                        "refused TYPE: MESSAGE" when the opener refused it; flushed.

Started once and fed a URL per round, so that all of a round's openers are already
running (imported, waiting on a read) and go at the same moment the line arrives.
"""

from __future__ import annotations

import sys

from dispatch.errors import DispatchError
from dispatch.stores.select import open_store


def say(*words: object) -> None:
    print(*words, flush=True)


def main() -> int:
    say("ready")
    for line in sys.stdin:
        url = line.strip()
        try:
            open_store(url).close()
        except DispatchError as err:
            say("refused", f"{type(err).__name__}: {' '.join(str(err).split())}")
            continue
        say("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
