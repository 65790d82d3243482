{{/*
The RBAC rules, exactly kai_ray/cluster/kube/permissions.py's lists: what `serve` and
`podgrouper` check for at start-up (SelfSubjectAccessReview) and nothing more.
tests/helm/test_chart_rbac.py renders the chart and compares these rules with the Python lists.
*/}}

{{/* SCHEDULER_PERMISSIONS (+ PODGROUPER_PERMISSIONS when the podgrouper runs in-process,
+ API_PERMISSIONS when the scheduler serves the gRPC API). */}}
{{- define "kai-ray.schedulerRules" -}}
# Pods: the cache (its own and other schedulers' pods on the nodes), node-pool and GPU-group
# labels and PodGroup links, binding, evicting (the Eviction API), explaining.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
- apiGroups: [""]
  resources: [pods/binding, pods/eviction]
  verbs: [create]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
# Namespaces: their labels, which inter-pod affinity terms' namespaceSelectors match.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [list, watch]
- apiGroups: [kai.scheduler]
  resources: [topologies]
  verbs: [list, watch]
# Volumes and ConfigMaps pods name (where a pod may run, what it waits for); a delayed claim is
# annotated with its pod's node before the pod is bound.
- apiGroups: [""]
  resources: [persistentvolumes, configmaps]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, watch, patch]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [list, watch]
- apiGroups: [scheduling.run.ai]
  resources: [queues]
  verbs: [list, watch]
{{- if .Values.podgrouper.inProcess }}
# PodGroups: the scheduler patches them; its in-process podgrouper creates and updates them.
- apiGroups: [scheduling.run.ai]
  resources: [podgroups]
  verbs: [get, list, watch, create, update, patch]
{{- else }}
# PodGroups: the podgrouper makes them; the scheduler only patches them.
- apiGroups: [scheduling.run.ai]
  resources: [podgroups]
  verbs: [get, list, watch, patch]
{{- end }}
- apiGroups: [scheduling.run.ai]
  resources: [bindrequests]
  verbs: [get, list, watch, create, delete]
- apiGroups: [scheduling.run.ai]
  resources: [queues/status, podgroups/status, bindrequests/status]
  verbs: [patch]
{{- if .Values.scheduler.grpc.enabled }}
{{ include "kai-ray.apiRules" . }}
{{- end }}
{{- if .Values.podgrouper.inProcess }}
{{ include "kai-ray.ownerReadRules" . }}
{{- end }}
{{- end -}}

{{/* API_PERMISSIONS: the gRPC API's writes (scheduler.grpc.enabled). */}}
{{- define "kai-ray.apiRules" -}}
# The gRPC API: SubmitWorkload creates PodGroups and pods, CancelWorkload deletes them, and a
# submit that failed half-way reads back and deletes what it made (its other reads are the cache).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, create, delete]
- apiGroups: [scheduling.run.ai]
  resources: [podgroups]
  verbs: [get, create, delete]
{{- end -}}

{{/* PODGROUPER_PERMISSIONS + OWNER_READ_PERMISSIONS: `kai-ray podgrouper` alone. */}}
{{- define "kai-ray.podgrouperRules" -}}
# Pods: read them, link each to its PodGroup, and say why one cannot be grouped.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [list, watch]
- apiGroups: [scheduling.run.ai]
  resources: [podgroups]
  verbs: [get, list, watch, create, update]
{{ include "kai-ray.ownerReadRules" . }}
{{- end -}}

{{/* OWNER_READ_PERMISSIONS: the workload kinds the podgrouper follows up a pod's owner chain. */}}
{{- define "kai-ray.ownerReadRules" -}}
# What the podgrouper reads to find a pod's workload (KAI's owner kinds). Each is optional:
# without one, that kind's pods are grouped by the owner below it, and start-up names the
# kinds it cannot read.
- apiGroups: [""]
  resources: [replicationcontrollers]
  verbs: [get, list]
- apiGroups: [apps]
  resources: [deployments, replicasets, statefulsets]
  verbs: [get, list]
- apiGroups: [batch]
  resources: [jobs, cronjobs]
  verbs: [get, list]
- apiGroups: [ray.io]
  resources: [rayclusters, rayjobs, rayservices]
  verbs: [get, list]
- apiGroups: [kubeflow.org]
  resources: [pytorchjobs, mpijobs, tfjobs, xgboostjobs, jaxjobs, notebooks, scheduledworkflows]
  verbs: [get, list]
- apiGroups: [trainer.kubeflow.org]
  resources: [trainjobs]
  verbs: [get, list]
- apiGroups: [argoproj.io]
  resources: [workflows]
  verbs: [get, list]
- apiGroups: [jobset.x-k8s.io]
  resources: [jobsets]
  verbs: [get, list]
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [get, list]
- apiGroups: [serving.knative.dev]
  resources: [services, configurations, revisions]
  verbs: [get, list]
- apiGroups: [grove.io]
  resources: [podcliquesets, podgangsets, podcliques, podcliquescalinggroups]
  verbs: [get, list]
- apiGroups: [scheduler.grove.io]
  resources: [podgangs]
  verbs: [get, list]
- apiGroups: [tekton.dev]
  resources: [pipelineruns, taskruns]
  verbs: [get, list]
- apiGroups: [machinelearning.seldon.io]
  resources: [seldondeployments]
  verbs: [get, list]
- apiGroups: [kubevirt.io]
  resources: [virtualmachines, virtualmachineinstances]
  verbs: [get, list]
- apiGroups: [workspace.devfile.io]
  resources: [devworkspaces]
  verbs: [get, list]
- apiGroups: [amlarc.azureml.com]
  resources: [amljobs]
  verbs: [get, list]
- apiGroups: [egx.nvidia.io]
  resources: [spotrequests]
  verbs: [get, list]
- apiGroups: [run.ai]
  resources: [runaijobs, trainingworkloads, interactiveworkloads, distributedworkloads, inferenceworkloads, distributedinferenceworkloads, kartas]
  verbs: [get, list]
{{- end -}}

{{/* LEASE_PERMISSIONS: leader election, in the release namespace only (a Role). */}}
{{- define "kai-ray.leaseRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
{{- end -}}

{{/* USAGE_PERMISSIONS: the scheduler's recorded queue usage (time-based fair share), a ConfigMap
beside its Lease. */}}
{{- define "kai-ray.usageRules" -}}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, update]
{{- end -}}

{{/*
A component's ServiceAccount, ClusterRole + binding and lease Role + binding.
(dict "root" $ "component" "scheduler" "name" "kai-ray-scheduler" "rules" "kai-ray.schedulerRules")
*/}}
{{- define "kai-ray.rbac" -}}
{{- $labels := include "kai-ray.componentLabels" (dict "root" .root "component" .component) -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- $labels | nindent 4 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .name }}
  labels:
    {{- $labels | nindent 4 }}
rules:
{{ include .rules .root }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}
  labels:
    {{- $labels | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
---
# Leader election: the component's Lease in the release namespace (--lease-namespace).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}-leader
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- $labels | nindent 4 }}
rules:
{{ include "kai-ray.leaseRules" .root }}
{{- if eq .component "scheduler" }}
{{ include "kai-ray.usageRules" .root }}
{{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}-leader
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- $labels | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}-leader
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
{{- end -}}
