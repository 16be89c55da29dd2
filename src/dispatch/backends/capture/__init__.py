"""What a job leaves for dispatch beside its exit: the application error a failed process
wrote (app_error.py) and its progress file (progress.py), read the same way by every
backend."""
