"""The dispatch command line (click + rich): a thin layer over ``dispatch.service``.

Exit codes (``dispatch.errors``): 0 ok (run: succeeded); 1 run: the job failed; 2 bad input
(spec, policy, usage); 3 no such job / ambiguous name; 4 the scheduler could not be reached
(submit: the job is recorded all the same); 5 the record store could not be used; 6 the
request does not fit the job's state; 75 run: supervising stopped (Ctrl-C), the job keeps
running; 130 cancelled; 141 stdout's reader went away. Errors
name the file, key or job and never print a traceback unless --debug.

Command modules are imported when their command runs (``LazyGroup``): ``dispatch status``
never pays for the segment-health, policy or HTTP server code.
"""

from dispatch.cli.group import COMMAND_MODULES, EXIT_PIPE_CLOSED, main

__all__ = ["COMMAND_MODULES", "EXIT_PIPE_CLOSED", "main"]
