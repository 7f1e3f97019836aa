"""The one package that talks to Kubernetes: a rate-limited, retrying client per Cluster.

Everything else in the portal calls `client_for(cluster)` and works with plain dicts. Errors are
classified once, here: `TransientError` (connection trouble, 429, 5xx, races worth retrying) and
`PermanentError` (the API refused the request: 400, 403, 404 where it matters, 422 ...), both
carrying what the API server said. Nothing outside this package imports `kubernetes`.
"""

from fleet.kube.client import (
    APPLY_CONTENT_TYPE,
    FIELD_MANAGER,
    LIST_PAGE_SIZE,
    MERGE_PATCH_CONTENT_TYPE,
    PROBE_TIMEOUT,
    REQUEST_TIMEOUT,
    USER_AGENT,
    ApiResource,
    KubeClient,
)
from fleet.kube.clusters import (
    build_api_client,
    clear_client_cache,
    client_for,
    in_cluster_available,
    kubeconfig_contexts,
    kubeconfig_problem,
)
from fleet.kube.errors import (
    ConfigurationError,
    KubeError,
    PermanentError,
    ResourceExpired,
    TransientError,
    error_from_response,
)
from fleet.kube.health import ClusterBusy, ClusterHealth, ClusterUnavailable
from fleet.kube.ratelimit import TokenBucket

__all__ = [
    "in_cluster_available",
    "APPLY_CONTENT_TYPE",
    "FIELD_MANAGER",
    "LIST_PAGE_SIZE",
    "MERGE_PATCH_CONTENT_TYPE",
    "PROBE_TIMEOUT",
    "REQUEST_TIMEOUT",
    "USER_AGENT",
    "ApiResource",
    "ClusterBusy",
    "ClusterHealth",
    "ClusterUnavailable",
    "ConfigurationError",
    "KubeClient",
    "KubeError",
    "PermanentError",
    "ResourceExpired",
    "TokenBucket",
    "TransientError",
    "build_api_client",
    "clear_client_cache",
    "client_for",
    "error_from_response",
    "kubeconfig_contexts",
    "kubeconfig_problem",
]
