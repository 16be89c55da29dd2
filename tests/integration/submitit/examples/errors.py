import dispatch.submitit as submitit
from operator import truediv

executor = submitit.AutoExecutor(folder="log_test")
executor.update_parameters(timeout_min=1, slurm_partition="dev")
job = executor.submit(truediv, 1, 0)

job.result()  # will raise a FailedJobError stating the ZeroDivisionError with its stacktrace
full_stderr = job.stderr()  # recover the full stack trace if need be
# the stderr log is written in file job.get_logs_path("stderr")
