"""How dispatch starts its own Python code in another process: the local backend's runner and
a function's bootstrap on every node (``dispatch.Executor``).

``python -m MODULE`` puts the working directory first on ``sys.path`` and honours PYTHONPATH,
PYTHONHOME, PYTHONSTARTUP and the user's site-packages, so a ``dispatch/`` package (or a
``cloudpickle.py``, a ``msgspec.py``) that another user left in a shared working directory,
or in a directory a stray PYTHONPATH names, would be imported by dispatch's own code and run
as the submitter. So these processes run ``python -I`` (isolated: neither the working
directory nor the script's on the path, no PYTHON* variable, no user site-packages), with a
fixed one-line program (``LAUNCH``) that puts the directory this process imported dispatch
from first on the path and runs the module: the new process runs the same dispatch as the
one that started it, installed or not, and its dependencies from the interpreter's own
installation. A pod's command (Kubeflow) uses the image's installed dispatch:
``python -I -m MODULE``.

What a job runs itself (its command, a user's function once the bootstrap has loaded it)
keeps its own environment: see dispatch/fn/bootstrap.py for the import path a function gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# argv: LAUNCH PACKAGE_PARENT MODULE ARGS...; the module sees ``sys.argv == [its file, ARGS]``
# as under ``-m``. Constant: nothing of the caller's is ever part of the program.
LAUNCH = ("import sys,runpy;p,m=sys.argv[1:3];del sys.argv[1:3];"
          "p in sys.path or sys.path.insert(0,p);"
          "runpy.run_module(m,run_name='__main__',alter_sys=True)")


def package_parent() -> str:
    """The directory this process imported the ``dispatch`` package from: this file is
    dispatch/support/isolated.py there (found from it, so support imports nothing above)."""
    return str(Path(__file__).resolve().parent.parent.parent)


def isolated_argv(python: str, module: str, args: Sequence[str],
                  parent: str | None) -> list[str]:
    """The argv that runs ``python -m module args`` isolated. ``parent``: the directory to
    import dispatch from (``package_parent()``), or None for the interpreter's installed
    one (a pod's image)."""
    if parent is None:
        return [python, "-I", "-m", module, *args]
    return [python, "-I", "-c", LAUNCH, parent, module, *args]
