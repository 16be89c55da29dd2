"""Supervise: the loop that watches every job (loop.py), the leases that let one supervisor
act at a time (leases.py), the scopes a supervisor owns (scopes.py), finding jobs a backend
runs (discovery.py), and sending escalations (escalations.py)."""
