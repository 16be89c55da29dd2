import dispatch.submitit as submitit

from operator import add
executor = submitit.AutoExecutor(folder="log_test")
# 3 * 2 = 6 tasks
executor.update_parameters(tasks_per_node=3, nodes=2, timeout_min=1, slurm_partition="dev")
job = executor.submit(add, 5, 7)  # will compute add(5, 7)
print(job.task(2).result())  # Wait for task #2 result
print(job.task(2).stdout())  # Show task # stdout
print(job.result())  # Wait for all tasks and returns a list of results.
print(job.stdout())  # Concatenated stdout of all tasks
