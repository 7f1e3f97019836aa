"""Web form for defining a node pool."""

import json

from django import forms

from core.forms import RefusesLoneSurrogates
from fleet.models import Cluster, GpuModel, NodePool
from fleet.quantities import cpu_millis, cpu_text, memory_mib, memory_text
from fleet.services.pools import TAINT_EFFECTS


def _parse_pairs(text: str, what: str) -> dict:
    pairs = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if "=" not in line:
            raise forms.ValidationError(f"Write each {what} as key=value (got {line!r}).")
        key, value = line.split("=", 1)
        pairs[key.strip()] = value.strip()
    return pairs


class PoolForm(RefusesLoneSurrogates, forms.Form):
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), empty_label=None)
    name = forms.CharField(
        max_length=63, help_text="A DNS-1123 label; it names the Kueue ResourceFlavor."
    )
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.all(), label="GPU model")
    node_selector = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "accelerator=nvidia-a100-80gb"}),
        label="Node labels",
        help_text="One key=value per line; nodes with all of these labels are in the pool.",
    )
    taints = forms.CharField(
        required=False,
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "nvidia.com/gpu=present:NoSchedule"}
        ),
        help_text="One key=value:Effect per line (as kubectl taint writes them).",
    )
    tolerations = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="JSON list; leave empty to derive them from the taints.",
    )
    capacity_type = forms.ChoiceField(choices=NodePool.CapacityType.choices)
    interconnect = forms.ChoiceField(choices=NodePool.Interconnect.choices)
    sharing = forms.ChoiceField(
        choices=NodePool.Sharing.choices,
        help_text="Read from the nodes at each inventory sync (a MIG pool counts the instances "
        "of its profile); set it here for a pool whose nodes are not synced yet.",
    )
    mig_profile = forms.CharField(
        required=False, max_length=32, label="MIG profile",
        help_text="For MIG nodes that offer several profiles (e.g. 3g.40gb, 2g.20gb and 1g.10gb "
        "on one GPU): the one this pool counts and its jobs get; every node of the pool must "
        "offer it. Empty: the profile of which the nodes have the most instances.",
    )  # fmt: skip
    allow_oversubscription = forms.BooleanField(
        required=False, help_text="Let managers grant more nominal quota than the pool holds."
    )
    cpu_per_gpu = forms.CharField(
        required=False, max_length=32, label="CPUs per GPU",
        help_text="What a worker gets per GPU when its job does not say (e.g. 12 or 11500m). "
        "Empty: the smallest GPU node's allocatable CPUs divided by its GPUs.",
    )  # fmt: skip
    memory_per_gpu = forms.CharField(
        required=False, max_length=32, label="Memory per GPU",
        help_text="Likewise for memory (e.g. 96Gi). Empty: from the nodes.",
    )  # fmt: skip
    topology_levels = forms.CharField(
        required=False, label="Topology levels",
        widget=forms.Textarea(attrs={
            "rows": 3,
            "placeholder": "block=cloud.provider.com/topology-block\n"
            "rack=cloud.provider.com/topology-rack\nhost=kubernetes.io/hostname",
        }),
        help_text="Widest first, one name=node label per line. Jobs can then ask to keep their "
        "workers within one block, rack or host. Fixed once saved (Kueue does not allow changes).",
    )  # fmt: skip

    @classmethod
    def for_pool(cls, pool: NodePool, data=None):
        initial = {name: getattr(pool, name, None) for name in cls.base_fields}
        if pool.cpu_per_gpu_millis:
            initial["cpu_per_gpu"] = cpu_text(pool.cpu_per_gpu_millis)
        if pool.memory_per_gpu_mib:
            initial["memory_per_gpu"] = memory_text(pool.memory_per_gpu_mib)
        initial["node_selector"] = "\n".join(f"{k}={v}" for k, v in pool.node_selector.items())
        initial["taints"] = "\n".join(
            f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in pool.taints
        )
        initial["tolerations"] = json.dumps(pool.tolerations) if pool.tolerations else ""
        initial["topology_levels"] = "\n".join(
            f"{lv['name']}={lv['node_label']}" for lv in pool.topology_levels or []
        )
        form = cls(data, initial=initial)
        # A pool stays on its cluster: moving would orphan its quotas and flavor.
        form.fields["cluster"].disabled = True
        return form

    def clean(self):
        """CPUs and memory per GPU as the model's units (cpu_per_gpu_millis, ...)."""
        data = super().clean()
        for field, target, parse, example in (
            ("cpu_per_gpu", "cpu_per_gpu_millis", cpu_millis, "12 or 11500m"),
            ("memory_per_gpu", "memory_per_gpu_mib", memory_mib, "96Gi"),
        ):
            text = (data.pop(field, "") or "").strip()
            amount = parse(text) if text else None
            if text and (not amount or amount > 2**31 - 1):
                self.add_error(field, f"Give a Kubernetes quantity, e.g. {example}.")
            data[target] = amount
        return data

    def clean_node_selector(self):
        return _parse_pairs(self.cleaned_data["node_selector"], "node label")

    def clean_topology_levels(self):
        levels = []
        for line in self.cleaned_data["topology_levels"].splitlines():
            name, sep, label = line.strip().partition("=")
            if not line.strip():
                continue
            if not sep:
                raise forms.ValidationError(
                    f"Write each level as name=node label, e.g. rack=cloud.provider.com/"
                    f"topology-rack (got {line.strip()!r})."
                )
            levels.append({"name": name.strip(), "node_label": label.strip()})
        return levels

    def clean_taints(self):
        taints = []
        for line in self.cleaned_data["taints"].splitlines():
            line = line.strip()
            if not line:
                continue
            head, sep, effect = line.rpartition(":")
            if not sep or effect not in TAINT_EFFECTS:
                raise forms.ValidationError(
                    f"Write each taint as key=value:Effect with Effect one of "
                    f"{', '.join(TAINT_EFFECTS)} (got {line!r})."
                )
            key, _, value = head.partition("=")
            taint = {"key": key.strip(), "effect": effect}
            if value.strip():
                taint["value"] = value.strip()
            taints.append(taint)
        return taints

    def clean_tolerations(self):
        text = self.cleaned_data["tolerations"].strip()
        if not text:
            return None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from exc
        if not isinstance(value, list):
            raise forms.ValidationError("Give a JSON list of tolerations.")
        return value
