"""The operations people and programs do to jobs, over one record store and the backends.

The CLI (``dispatch.cli``), and the HTTP and Python APIs, are thin layers over ``Service``
(operations.py): they parse their input, call one method, and render the result. Beside it:
listing and pages (``ls``), views (what a job shows), requests (the events a person's
request appends), logs (following a job's output), goodput, specfile (reading a spec file).
"""

from dispatch.service.operations import JobView, Service, dry_run_of, prepare

__all__ = ["JobView", "Service", "dry_run_of", "prepare"]
