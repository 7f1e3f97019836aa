"""Everything kubesim serves, including what the controllers write, reads through typed models.

The v37 client validates responses with pydantic models, so a missing required field in an
object written by a controller breaks the portal's list calls; this guards that contract.
"""

from kubernetes import client

from kubesim.testing import wait_stepping

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def _setup_queue(k8s, namespace):
    co = client.CustomObjectsApi(k8s)
    co.create_cluster_custom_object(
        *KUEUE,
        "resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "l4"},
            "spec": {"nodeLabels": {"accelerator": "nvidia-l4"}},
        },
    )
    co.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "team-a"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "l4",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}],
                            }
                        ],
                    }
                ],
            },
        },
    )
    co.create_namespaced_custom_object(
        *KUEUE,
        namespace,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "default"},
            "spec": {"clusterQueue": "team-a"},
        },
    )


def _job(name):
    return {
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "default"}},
        "spec": {
            "suspend": True,
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"annotations": {"kubesim.dev/duration-seconds": "0.3"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "pytorch",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


def test_every_served_kind_deserializes_into_the_typed_models(k8s, namespace):
    v1, batch = client.CoreV1Api(k8s), client.BatchV1Api(k8s)
    _setup_queue(k8s, namespace)
    batch.create_namespaced_job(namespace, _job("train"))
    wait_stepping(
        lambda: (
            (batch.read_namespaced_job("train", namespace).status or client.V1JobStatus()).succeeded
        ),
        timeout=10,
    )
    assert v1.list_node().items
    assert v1.list_namespace().items
    assert v1.list_pod_for_all_namespaces().items
    v1.list_event_for_all_namespaces()
    v1.list_service_for_all_namespaces()
    batch.list_job_for_all_namespaces()
    client.SchedulingV1Api(k8s).list_priority_class()
