"""The Kubernetes resources the kubeflow backend reads and writes, as lightkube generic
resources (client.py re-exports them)."""

from __future__ import annotations

from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericNamespacedResource,
    create_api_info,
)


# Resource classes built here rather than through lightkube's global registry, so that nothing
# else in the process (or lightkube's own typed models) is affected.
class TrainJobRes(GenericNamespacedResource):
    _api_info = create_api_info("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")


class JobSetRes(GenericNamespacedResource):
    _api_info = create_api_info("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")


class JobRes(GenericNamespacedResource):
    _api_info = create_api_info("batch", "v1", "Job", "jobs")


class PodRes(GenericNamespacedResource):
    _api_info = create_api_info("", "v1", "Pod", "pods")


class EventRes(GenericNamespacedResource):
    _api_info = create_api_info("", "v1", "Event", "events")


class NodeRes(GenericGlobalResource):
    _api_info = create_api_info("", "v1", "Node", "nodes")


class ClusterRuntimeRes(GenericGlobalResource):
    _api_info = create_api_info("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime",
                                "clustertrainingruntimes")


class RuntimeRes(GenericNamespacedResource):
    _api_info = create_api_info("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime",
                                "trainingruntimes")
