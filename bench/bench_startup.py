"""CLI start-up: `dispatch status JOB` against `torchx --help`, side by side (a benchmark, not
a test: nothing here asserts a time).

    pip install torchx==0.7.0 into a throwaway venv, e.g.
        python3 -m venv /tmp/torchx-venv && /tmp/torchx-venv/bin/pip install torchx==0.7.0
    python bench/bench_startup.py --torchx /tmp/torchx-venv/bin/torchx
    python bench/bench_startup.py --torchx ... --before /tmp/before/src   # also an older tree

One job is recorded first (a local job run to its outcome, in a temporary store), so
`status` does what it does for a finished job: open the record store, fold the record,
print. Each command runs ROUNDS times, interleaved round by round (so a load change on a
shared machine hits every command alike), after WARMUP unmeasured rounds. Per command:
the median wall time and the median CPU time (user + system of the child, from
getrusage: less sensitive to other load than wall time), and each one's ratio to
`torchx --help`. Commands run as their installed entry scripts (`dispatch`, `torchx`);
``--before SRC`` adds `python -m dispatch.cli status` from another source tree, and the
same for this tree, for a before/after of the same launcher. With hyperfine on PATH it is
run as well and its summary printed. Both dispatch trees are byte-compiled first and run
without PYTHONDONTWRITEBYTECODE, as an installed package runs (torchx's venv has its .pyc
files); without that, an editable tree compiles every module from source on every run.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run; its output is discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def record_one_job(env: dict[str, str]) -> str:
    """A finished local job in the temporary store; its id."""
    code = ("import sys, dispatch\n"
            "job = dispatch.submit({'name': 'bench-startup', 'command': ['true']})\n"
            "st = job.wait(timeout=120, poll=0.2)\n"
            "assert st.state.value == 'succeeded', st\n"
            "print(job.id)\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torchx", required=True, help="the torchx entry script (0.7.0)")
    ap.add_argument("--dispatch", default=str(Path(sys.executable).parent / "dispatch"),
                    help="the dispatch entry script (default: beside this Python)")
    ap.add_argument("--before", default=None, help="another tree's src/ to compare")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    env = dict(os.environ)
    env.update({"DISPATCH_STORE": str(tmp / "record.sqlite3"),
                "DISPATCH_LOCAL_ROOT": str(tmp / "local"), "XDG_STATE_HOME": str(tmp)})
    env.pop("PYTHONPATH", None)
    # From byte-compiled modules, as torchx runs (see the docstring).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for tree in [ROOT / "src", *([Path(args.before)] if args.before else [])]:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "dispatch")],
                       check=True)
    job = record_one_job(env)

    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "torchx --help": ([args.torchx, "--help"], env),
        "dispatch status JOB": ([args.dispatch, "status", job], env),
        "dispatch status JOB --json": ([args.dispatch, "status", job, "--json"], env),
        "dispatch ls --all": ([args.dispatch, "ls", "--all"], env),
    }
    if args.before:
        before_env = {**env, "PYTHONPATH": str(Path(args.before).resolve())}
        commands["python -m dispatch.cli status JOB (this tree)"] = (
            [sys.executable, "-m", "dispatch.cli", "status", job], env)
        commands["python -m dispatch.cli status JOB (--before tree)"] = (
            [sys.executable, "-m", "dispatch.cli", "status", job], before_env)

    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for r in range(args.warmup + args.rounds):
        for name, (argv, cmd_env) in commands.items():
            wall, cpu = run_once(argv, cmd_env)
            if r >= args.warmup:
                walls[name].append(wall)
                cpus[name].append(cpu)

    ref_wall = statistics.median(walls["torchx --help"])
    ref_cpu = statistics.median(cpus["torchx --help"])
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; Python "
          f"{platform.python_version()}; {args.rounds} interleaved rounds after "
          f"{args.warmup} warm-up rounds\n")
    print("| command | median wall (ms) | wall ratio to torchx --help "
          "| median CPU (ms) | CPU ratio to torchx --help |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in commands:
        w = statistics.median(walls[name])
        c = statistics.median(cpus[name])
        print(f"| `{name}` | {w * 1000:.0f} | {w / ref_wall:.2f} | {c * 1000:.0f} | "
              f"{c / ref_cpu:.2f} |")

    if shutil.which("hyperfine"):
        print("\nhyperfine (runs each command in turn, not interleaved):\n")
        hf = subprocess.run(
            ["hyperfine", "-N", "--warmup", "3", "--runs", str(args.rounds), "--style",
             "basic", f"{args.dispatch} status {job}", f"{args.torchx} --help"],
            env=env, capture_output=True, text=True, check=False)
        print("```\n" + (hf.stdout + hf.stderr).strip() + "\n```")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
