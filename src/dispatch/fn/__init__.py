"""Python functions as dispatch jobs (``dispatch.Executor``): the call folder (calls.py), the
bootstrap every node runs (``python -m dispatch.fn FOLDER``, isolated: ``python -I``),
checkpoints (checkpoint.py), the distributed environment on each node (distributed.py) and
the handle (job.py)."""
