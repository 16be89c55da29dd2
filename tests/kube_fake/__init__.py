"""A stand-in Kubernetes API server for the kubeflow backend's tests (no cluster here)."""

from .server import FakeApiServer

__all__ = ["FakeApiServer"]
