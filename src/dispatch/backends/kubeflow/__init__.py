"""Kubeflow Trainer (TrainJob) backend. See docs/kubeflow.md."""

from dispatch.backends.kubeflow.backend import KubeflowBackend, ObjectGone
from dispatch.backends.kubeflow.manifest import KubeflowSpecError

__all__ = ["KubeflowBackend", "KubeflowSpecError", "ObjectGone"]
