{{/*
Names, labels and the pieces both components' pods share.
*/}}

{{/* The release's base name: the release name, or release-chart when it does not contain "kai-ray". */}}
{{- define "kai-ray.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kai-ray.schedulerName" -}}{{ include "kai-ray.fullname" . }}-scheduler{{- end -}}
{{- define "kai-ray.podgrouperName" -}}{{ include "kai-ray.fullname" . }}-podgrouper{{- end -}}

{{/* Labels of every object of the release (the uninstall test lists objects by them). */}}
{{- define "kai-ray.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kai-ray
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "scheduler"). */}}
{{- define "kai-ray.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kai-ray.componentLabels" -}}
{{ include "kai-ray.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kai-ray.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "kai-ray.queueLabelKey" -}}
{{- .Values.global.queueLabelKey | default .Values.podgrouper.queueLabelKey -}}
{{- end -}}

{{- define "kai-ray.nodePoolLabelKey" -}}
{{- .Values.global.nodePoolLabelKey | default "kai.scheduler/node-pool" -}}
{{- end -}}

{{/*
The pod spec fields both Deployments share: pull secrets, placement, the /tmp volume.
(dict "root" $ "component" "scheduler" "values" .Values.scheduler)
*/}}
{{- define "kai-ray.podPlacement" -}}
{{- $global := .root.Values.global -}}
{{- with $global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- with (.values.priorityClassName | default $global.priorityClassName) }}
priorityClassName: {{ . }}
{{- end }}
{{- with (.values.nodeSelector | default $global.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.tolerations | default $global.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $affinity := deepCopy (.values.affinity | default $global.affinity | default dict) -}}
{{- if and $global.requireDefaultPodAntiAffinityTerm (not (hasKey $affinity "podAntiAffinity")) -}}
{{- $selector := include "kai-ray.selectorLabels" (dict "root" .root "component" .component) | fromYaml -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" $selector) -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- end }}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The container fields both components share: image, identity from the downward API, the
metrics/health port and its probes, security context, resources, /tmp; and the gRPC port when
given one.
(dict "root" $ "values" .Values.scheduler ["grpcPort" 50051])
*/}}
{{- define "kai-ray.containerCommon" -}}
image: {{ include "kai-ray.image" .root }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
env:
  # The leader-election identity (--identity=$(POD_NAME)).
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  # The root filesystem is read-only: anything that writes to HOME writes to the /tmp emptyDir.
  - name: HOME
    value: /tmp
ports:
  - name: http-metrics
    containerPort: {{ .values.ports.metricsPort }}
    protocol: TCP
  {{- with .grpcPort }}
  - name: grpc
    containerPort: {{ . }}
    protocol: TCP
  {{- end }}
livenessProbe:
  httpGet:
    path: /healthz
    port: http-metrics
  initialDelaySeconds: 10
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
readinessProbe:
  httpGet:
    path: /readyz
    port: http-metrics
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 3
securityContext:
  {{- toYaml .root.Values.global.securityContext | nindent 2 }}
resources:
  {{- toYaml .values.resources | nindent 2 }}
{{- end -}}

{{/*
Default objects (queues, priority classes) are created only when absent, or already this
release's: one left by KAI (or made by hand) is kept as it is. `helm template` and client-side
dry runs see no cluster, so they render them all.
(dict "root" $ "apiVersion" "scheduling.k8s.io/v1" "kind" "PriorityClass" "name" "train")
*/}}
{{- define "kai-ray.ownsOrAbsent" -}}
{{- $found := lookup .apiVersion .kind "" .name -}}
{{- if not $found -}}
true
{{- else -}}
{{- $annotations := $found.metadata.annotations | default dict -}}
{{- if and (eq (get $annotations "meta.helm.sh/release-name") .root.Release.Name) (eq (get $annotations "meta.helm.sh/release-namespace") .root.Release.Namespace) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
KAI's scheduler configuration (config.yaml), as KAI's operator writes it for its default shard:
every enabled plugin by descending priority, the placement strategy in nodeplacement, the gpu
plugins of that strategy, consolidation dropped when spreading.
*/}}
{{- define "kai-ray.schedulerConfig" -}}
{{- $values := .Values.scheduler -}}
{{- if $values.config -}}
{{ $values.config }}
{{- else -}}
{{- $strategy := $values.placementStrategy -}}
{{- $spread := eq $strategy "spread" -}}
{{- /* Actions: KAI's defaults (consolidation off when spreading), then the overrides by name. */ -}}
{{- $actions := dict -}}
{{- range $name, $priority := dict "allocate" 500 "consolidation" 400 "reclaim" 300 "preempt" 200 "stalegangeviction" 100 -}}
{{- $_ := set $actions $name (dict "enabled" (not (and $spread (eq $name "consolidation"))) "priority" $priority) -}}
{{- end -}}
{{- range $name, $override := $values.actions -}}
{{- $action := get $actions $name | default (dict "enabled" true "priority" 0) -}}
{{- if hasKey $override "enabled" -}}
{{- $_ := set $action "enabled" $override.enabled -}}
{{- end -}}
{{- if hasKey $override "priority" -}}
{{- $_ := set $action "priority" $override.priority -}}
{{- end -}}
{{- $_ := set $actions $name $action -}}
{{- end -}}
{{- $actionOrder := list -}}
{{- range $name, $action := $actions -}}
{{- if $action.enabled -}}
{{- $actionOrder = append $actionOrder (printf "%07d/%s" (sub 1000000 (int $action.priority)) $name) -}}
{{- end -}}
{{- end -}}
{{- $enabledActions := list -}}
{{- range sortAlpha $actionOrder -}}
{{- $enabledActions = append $enabledActions (regexReplaceAll "^[0-9]+/" . "") -}}
{{- end -}}
{{- if not $enabledActions -}}
{{- fail "scheduler.actions: every action is disabled; kai-ray needs at least one" -}}
{{- end -}}
{{- $priorities := dict "predicates" 1900 "proportion" 1800 "priority" 1700 "nodeavailability" 1600 "resourcetype" 1500 "podaffinity" 1400 "elastic" 1300 "kubeflow" 1200 "ray" 1100 "subgrouporder" 1000 "taskorder" 900 "nominatednode" 800 "dynamicresources" 700 "minruntime" 600 "topology" 500 "snapshot" 400 "sg-nodelocalgreedy" 360 "sg-multinodegang" 350 "nodeplacement" 200 -}}
{{- if $spread -}}
{{- $_ := set $priorities "gpuspread" 300 -}}
{{- else -}}
{{- $_ := set $priorities "gpupack" 300 -}}
{{- $_ := set $priorities "gpusharingorder" 100 -}}
{{- end -}}
{{- $plugins := dict -}}
{{- range $name, $priority := $priorities -}}
{{- $arguments := dict -}}
{{- if eq $name "nodeplacement" -}}
{{- $arguments = dict "gpu" $strategy "cpu" $strategy -}}
{{- end -}}
{{- $_ := set $plugins $name (dict "enabled" true "priority" $priority "arguments" $arguments) -}}
{{- end -}}
{{- range $name, $override := $values.plugins -}}
{{- $plugin := get $plugins $name | default (dict "enabled" true "priority" 0 "arguments" dict) -}}
{{- if hasKey $override "enabled" -}}
{{- $_ := set $plugin "enabled" $override.enabled -}}
{{- end -}}
{{- if hasKey $override "priority" -}}
{{- $_ := set $plugin "priority" $override.priority -}}
{{- end -}}
{{- $_ := set $plugin "arguments" (merge (deepCopy ($override.arguments | default dict)) $plugin.arguments) -}}
{{- $_ := set $plugins $name $plugin -}}
{{- end -}}
{{- $order := list -}}
{{- range $name, $plugin := $plugins -}}
{{- if $plugin.enabled -}}
{{- $order = append $order (printf "%07d/%s" (sub 1000000 (int $plugin.priority)) $name) -}}
{{- end -}}
{{- end -}}
actions: {{ join ", " $enabledActions | quote }}
tiers:
- plugins:
{{- range sortAlpha $order }}
{{- $name := regexReplaceAll "^[0-9]+/" . "" }}
{{- $plugin := get $plugins $name }}
  - name: {{ $name }}
{{- with $plugin.arguments }}
    arguments:
{{- range $key, $value := . }}
      {{ $key }}: {{ toString $value | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- with $values.usageDBConfig }}
usageDBConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}
