"""What the ported submitit doc examples' tests share, on the local backend
(test_submitit_doc_examples.py) and on Slurm (tests/integration/slurm/
test_submitit_doc_examples_slurm.py): the names a doc leaves to its reader (preludes), and
the reading of run_example.py's last line."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "examples"
RUNNER = HERE / "run_example.py"

def checked(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ESCALATION" not in done.stderr  # escalations go to the folder's dispatch.log
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("CHECK: "), done.stdout
    return last[len("CHECK: ") :]

FOR_LOOP_PRELUDE = """
import dispatch.submitit as submitit
executor = submitit.AutoExecutor(folder="log_test")
whatever = [1, 2, 3]
def myfunc(arg):
    return arg * 2
"""

JOB_ENV_PRELUDE = """
process = sum
def _check():
    executor = submitit.AutoExecutor(folder="log_test")
    executor.update_parameters(tasks_per_node=2, nodes=1)
    job = executor.submit(my_func, list(range(10)))
    return job.results(), job.task(1).stdout()
"""
