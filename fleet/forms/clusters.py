"""Web form for registering a cluster."""

from django import forms

from fleet.models import Cluster


class ClusterForm(forms.Form):
    name = forms.CharField(max_length=63, help_text="A DNS-1123 label, e.g. 'gpu-east'.")
    in_cluster = forms.BooleanField(
        required=False,
        label="In-cluster",
        help_text="The portal runs inside this cluster and uses its service account.",
    )
    kubeconfig_path = forms.CharField(
        max_length=500,
        required=False,
        label="Kubeconfig path",
        help_text="Absolute path on the portal's servers, e.g. /etc/quartermaster/kubeconfig.",
    )
    context = forms.CharField(
        max_length=200, required=False, help_text="Leave empty for the kubeconfig's current one."
    )
    scheduler = forms.ChoiceField(choices=Cluster.Scheduler.choices)
    kueue_api_version = forms.ChoiceField(
        choices=Cluster.KueueApiVersion.choices,
        label="Kueue API version",
        help_text="v1beta2 for Kueue 0.15 and later; v1beta1 for older installs.",
    )
    is_default = forms.BooleanField(required=False, label="Default cluster")
    dcgm_scrape_urls = forms.CharField(
        required=False, label="DCGM exporter URLs", widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One per line: billing scrapes this cluster's GPU metrics there (the default "
        "cluster also uses DCGM_SCRAPE_URLS).",
    )  # fmt: skip
    prometheus_url = forms.URLField(
        assume_scheme="https",
        required=False, label="Prometheus URL",
        help_text="This cluster's own Prometheus, if billing reads it there instead.",
    )  # fmt: skip

    @classmethod
    def for_cluster(cls, cluster: Cluster, data=None):
        initial = {name: getattr(cluster, name) for name in cls.base_fields}
        initial["dcgm_scrape_urls"] = "\n".join(cluster.dcgm_scrape_urls or [])
        return cls(data, initial=initial)
