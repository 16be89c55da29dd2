"""The Slurm backend: parse (tool output), mapping (words -> state and cause, pure),
script (batch script and sbatch argv, pure) and backend (the shell that runs the tools)."""
