"""Runs one ported submitit example as its reader would: as the main program (functions
defined in it are pickled by value, as from a script or a notebook), with top-level
``await`` allowed (as in IPython or ``python -m asyncio``, where the asyncio example runs).

    python run_example.py EXAMPLE.py[+NEXT.py...] [PRELUDE] [CHECK]

Several examples joined by ``+`` run in order in one namespace (a doc's sections that build
on each other); a name without ``.py`` is a package's module, run as ``python -m`` would.

PRELUDE runs first in the same namespace (only for the names a doc leaves to its reader);
CHECK is an expression evaluated afterwards whose repr is printed as the last line
``CHECK: <repr>``. An exception of the example is printed as ``RAISED: <type>: <words>``
and the exit status is 3."""

from __future__ import annotations

import ast
import asyncio
import os
import runpy
import sys
import types


def run(paths: str, prelude: str, check: str) -> int:
    sys.path.insert(0, os.getcwd())  # as ``python -m`` or ``python -c`` would
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    namespace = main.__dict__
    if prelude:
        exec(compile(prelude, "<prelude>", "exec"), namespace)  # noqa: S102
    try:
        for path in paths.split("+"):
            if not path.endswith(".py"):  # a module of a package: python -m PACKAGE.MODULE
                namespace.update(runpy.run_module(path, run_name="__main__"))
                continue
            main.__file__ = path
            with open(path, encoding="utf-8") as f:
                code = compile(f.read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            outcome = eval(code, namespace)  # noqa: S307 - a coroutine with top-level await
            if asyncio.iscoroutine(outcome):
                asyncio.run(outcome)
    except Exception as err:  # the test reads which, and its words
        print(f"RAISED: {type(err).__module__}.{type(err).__qualname__}: {err}", flush=True)
        return 3
    if check:
        print(f"CHECK: {eval(check, namespace)!r}", flush=True)  # noqa: S307
    return 0


if __name__ == "__main__":
    args = sys.argv[1:] + ["", ""]
    sys.exit(run(args[0], args[1], args[2]))
