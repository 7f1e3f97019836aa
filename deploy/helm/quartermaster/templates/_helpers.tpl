{{/* Names: the release's, short enough for every suffix a component adds. */}}
{{- define "quartermaster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{- define "quartermaster.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The portal's version: the image tag, else the chart's appVersion. */}}
{{- define "quartermaster.version" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "quartermaster.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (include "quartermaster.version" .) }}
{{- if .Values.image.digest }}
{{- $ref = printf "%s@%s" $ref .Values.image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/* Selector labels of a component: (dict "root" $ "component" "web"). */}}
{{- define "quartermaster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quartermaster.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{- define "quartermaster.labels" -}}
{{ include "quartermaster.selectorLabels" . }}
app.kubernetes.io/version: {{ include "quartermaster.version" .root | quote }}
app.kubernetes.io/part-of: quartermaster
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{/* A component's ServiceAccount. */}}
{{- define "quartermaster.serviceAccount" -}}
{{ include "quartermaster.fullname" .root }}-{{ .component }}
{{- end }}

{{/* The ClusterRole a component holds in each team namespace. */}}
{{- define "quartermaster.teamRole" -}}
{{ include "quartermaster.fullname" .root }}-team-{{ .component }}
{{- end }}

{{/* KUBE_TEAM_NAMESPACE_ROLES: each team role and the account that holds it there. */}}
{{- define "quartermaster.teamNamespaceRoles" -}}
{{- $roles := dict }}
{{- if .Values.rbac.create }}
{{- range $component := list "web" "worker" }}
{{- $account := dict "root" $ "component" $component }}
{{- $_ := set $roles (include "quartermaster.teamRole" $account) (list (printf "%s/%s" $.Release.Namespace (include "quartermaster.serviceAccount" $account))) }}
{{- end }}
{{- end }}
{{- toJson $roles }}
{{- end }}

{{/* system:serviceaccount:<namespace>:<name>, as the API server names a ServiceAccount. */}}
{{- define "quartermaster.serviceAccountUser" -}}
system:serviceaccount:{{ .root.Release.Namespace }}:{{ include "quartermaster.serviceAccount" . }}
{{- end }}

{{/* The migration Job's name, one per version: a Job's template cannot change, so the next
release's Job is a new object (and the old one goes after ttlSecondsAfterFinished). */}}
{{- define "quartermaster.migrateJob" -}}
{{- $version := include "quartermaster.version" . | lower | replace "." "-" | replace "_" "-" | replace "+" "-" }}
{{- if .Values.image.digest }}
{{- $version = printf "%s-%s" $version (.Values.image.digest | trimPrefix "sha256:" | trunc 10) }}
{{- end }}
{{- printf "%s-migrate-%s" (include "quartermaster.fullname" .) $version | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Every pod: non-root, no privileges, the runtime's seccomp profile. */}}
{{- define "quartermaster.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 1000
  runAsGroup: 1000
  fsGroup: 1000
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Writable places only where the app writes (var/ and /tmp); the root filesystem is read-only. */}}
{{- define "quartermaster.volumes" -}}
volumes:
- name: var
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- if .kubeconfigs }}
{{- range .root.Values.kubeconfigSecrets }}
- name: kubeconfig-{{ .secretName }}
  secret:
    secretName: {{ .secretName }}
{{- end }}
{{- end }}
{{- end }}

{{/* One container of the portal's image: (dict "root" $ "component" "web" "name" "web" "args" (list ...) "kubeconfigs" true). */}}
{{- define "quartermaster.container" -}}
- name: {{ .name }}
  image: {{ include "quartermaster.image" .root }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  command: ["scripts/serve"]
  args: {{ toJson .args }}
  envFrom:
  - configMapRef:
      name: {{ include "quartermaster.fullname" .root }}-config
  env:
  {{- $component := .component }}
  {{- range $name, $ref := .root.Values.secretEnv }}
  {{- if or (not $ref.components) (has $component $ref.components) }}
  - name: {{ $name }}
    valueFrom:
      secretKeyRef:
        name: {{ $ref.secret | default $.root.Values.existingSecret }}
        key: {{ $ref.key | default $name }}
        optional: {{ $ref.optional | default false }}
  {{- end }}
  {{- end }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
  - name: var
    mountPath: /app/var
  - name: tmp
    mountPath: /tmp
  {{- if .kubeconfigs }}
  {{- range .root.Values.kubeconfigSecrets }}
  - name: kubeconfig-{{ .secretName }}
    mountPath: /app/kubeconfigs/{{ .secretName }}
    readOnly: true
  {{- end }}
  {{- end }}
  resources:
    {{- toYaml .resources | nindent 4 }}
{{- end }}

{{/* Web's and the workers' first container: until the schema is the one of this version (the
migration Job's work), `manage.py migrate --check` fails and the pod waits. */}}
{{- define "quartermaster.waitForSchema" -}}
{{- if .root.Values.waitForSchema }}
initContainers:
{{ include "quartermaster.container" (dict "root" .root "component" .component "name" "wait-for-schema" "args" (list "wait-for-schema") "resources" .root.Values.migrate.resources) }}
{{- end }}
{{- end }}

{{/* Pods of a component spread over nodes: hard for web, a preference for workers. */}}
{{- define "quartermaster.spread" -}}
{{- if .spread }}
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: {{ .when }}
  labelSelector:
    matchLabels:
      {{- include "quartermaster.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/* Pod annotations that tell Prometheus where a component's metrics are (metrics.scrape:
annotations). */}}
{{- define "quartermaster.scrapeAnnotations" -}}
{{- if eq .root.Values.metrics.scrape "annotations" }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}
