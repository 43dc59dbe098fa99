{{/*
Small helpers. app/k8s/templates/*.j2 and app/k8s/render.py mirror these one for one:
a change here needs the same change there (tests/contract/test_render_parity.py checks).
*/}}

{{/* A scalar as the string Python renders too: integral numbers without ".0" or exponent. */}}
{{- define "trainctl.str" -}}
{{- if kindIs "float64" . -}}
{{- /* Whole numbers print as integers only while float64 holds them exactly (below 2^53):
int64 of 1e21 overflows. Beyond that, Go's own %v form (1e+21). */ -}}
{{- if and (eq . (floor .)) (lt . 9007199254740992.0) (gt . -9007199254740992.0) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else -}}{{ . }}{{- end -}}
{{- end -}}

{{/* Canonical text of parsed YAML for the content hash: sorted keys, length-prefixed strings,
numbers via trainctl.str, so Go and Python agree byte for byte without JSON's quirks. */}}
{{- define "trainctl.canon" -}}
{{- if kindIs "map" . -}}
{{- $m := . -}}
{ {{- range $i, $k := keys $m | sortAlpha -}}{{ if $i }},{{ end }}s{{ len $k }}:{{ $k }}={{ include "trainctl.canon" (get $m $k) }}{{- end -}} }
{{- else if kindIs "slice" . -}}
[ {{- range $i, $x := . -}}{{ if $i }},{{ end }}{{ include "trainctl.canon" $x }}{{- end -}} ]
{{- else if kindIs "string" . -}}s{{ len . }}:{{ . }}
{{- else if kindIs "bool" . -}}b{{ . }}
{{- else if kindIs "invalid" . -}}null
{{- else -}}n{{ include "trainctl.str" . }}
{{- end -}}
{{- end -}}

{{- define "trainctl.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}{{ $img.repository }}@{{ $img.digest }}
{{- else -}}{{ $img.repository }}:{{ $img.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Labels of pod templates too: no managed-by here, since it differs between Helm and
`trainctl render` and pod templates are part of the hashed spec. */}}
{{- define "trainctl.commonLabels" -}}
app.kubernetes.io/name: trainctl
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: trainctl
{{- range $k, $v := .Values.labels }}
{{ $k | quote }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* Top-level objects' labels: the chart and version they came from, as `helm create`'s charts
say it (not on pod templates: a chart release alone would replace every pod). */}}
{{- define "trainctl.labels" -}}
{{ include "trainctl.commonLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end -}}

{{- define "trainctl.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}{{ .Values.serviceAccount.name }}
{{- else if .Values.serviceAccount.create -}}{{ printf "%s-ray" .Release.Name }}
{{- else -}}default
{{- end -}}
{{- end -}}

{{- define "trainctl.claimName" -}}
{{ .Values.storage.existingClaim | default (printf "%s-shared" .Release.Name) }}
{{- end -}}

{{/* An imagePullSecrets entry: a Secret's name, or Kubernetes' own form {name: ...}. */}}
{{- define "trainctl.pullSecretName" -}}
{{- if kindIs "map" . }}{{ .name }}{{ else }}{{ . }}{{ end -}}
{{- end -}}

{{- define "trainctl.authSecretName" -}}
{{ .Values.rayAuth.existingSecret | default (printf "%s-ray-auth" .Release.Name) }}
{{- end -}}

{{- define "trainctl.mountPath" -}}
{{ .Values.storage.mountPath | trimSuffix "/" }}
{{- end -}}

{{/* "true" when runs and data live in a bucket (storage.type s3 or gcs), "" with the volume. */}}
{{- define "trainctl.objectStore" -}}
{{- if ne .Values.storage.type "pvc" -}}true{{- end -}}
{{- end -}}

{{/* The folder runsSubPath and dataSubPath hang off: the volume's mount path, or
<s3|gs>://<bucket>[/<prefix>] (an empty prefix gives no double slash). */}}
{{- define "trainctl.storageRoot" -}}
{{- $s := .Values.storage -}}
{{- if include "trainctl.objectStore" . -}}
{{ ternary "gs" "s3" (eq $s.type "gcs") }}://{{ $s.bucket }}{{ with $s.prefix }}/{{ . }}{{ end }}
{{- else -}}
{{ include "trainctl.mountPath" . }}
{{- end -}}
{{- end -}}

{{/* "true" when the data pool autoscales (dataPool.enabled and dataPool.autoscaling): the
RayJobs then enable KubeRay's in-tree autoscaler. */}}
{{- define "trainctl.autoscaling" -}}
{{- $d := .Values.dataPool -}}
{{- if and $d.enabled $d.autoscaling -}}true{{- end -}}
{{- end -}}

{{/* The gang scheduler in effect, as JSON: .Values.scheduler, except that while scheduler.name
is empty the deprecated kueue block (kueue.enabled) is read as scheduler.name=kueue for one
release, so old values files render the same RayJobs ("trainctl.checks" refuses both set).
Mirrored by app/k8s/deprecated.py and the "scheduler" macro of app/k8s/templates/_macros.j2. */}}
{{- define "trainctl.scheduler" -}}
{{- $s := deepCopy .Values.scheduler -}}
{{- $k := .Values.kueue | default dict -}}
{{- if and $k.enabled (not $s.name) -}}
{{- $_ := set $s "name" "kueue" -}}
{{- $_ := set $s "queue" ($k.queueName | default "") -}}
{{- $_ := set $s "priorityClass" ($k.priorityClass | default "") -}}
{{- end -}}
{{- toJson $s -}}
{{- end -}}

{{- define "trainctl.kueueMoved" -}}
kueue.queueName moved to scheduler.name=kueue and scheduler.queue (and kueue.priorityClass to scheduler.priorityClass): see docs/kubernetes.md#gang-scheduling
{{- end -}}

{{/* DEPRECATION lines for NOTES.txt; app/k8s/deprecated.py notes() prints the same. */}}
{{- define "trainctl.deprecations" -}}
{{- if hasKey .Values "kueue" -}}
DEPRECATION: the kueue block will be refused by a later chart version; {{ if (.Values.kueue | default dict).enabled }}this chart version reads kueue.enabled=true as scheduler.name=kueue{{ else }}this chart version ignores the block (kueue.enabled is not true){{ end }}. {{ include "trainctl.kueueMoved" . }}
{{- end -}}
{{- end -}}

{{/* The priorityClassName of every Ray pod and the submitter: set by the chart for the
schedulers that read the pod's own priority (Kubernetes' default scheduler, YuniKorn,
scheduler-plugins); Kueue, Volcano and KAI take it from a label on the RayJob
("trainctl.schedulerLabels"). */}}
{{- define "trainctl.podPriorityClass" -}}
{{- $s := include "trainctl.scheduler" . | fromJson -}}
{{- if has $s.name (list "" "yunikorn" "scheduler-plugins") -}}{{ $s.priorityClass }}{{- end -}}
{{- end -}}

{{/* The Ray pods' schedulerName (head and workers; the submitter is not in the gang): with
scheduler-plugins, the scheduler running the coscheduling plugin. Other schedulers set it
through KubeRay's plugin, or not at all. */}}
{{- define "trainctl.podSchedulerName" -}}
{{- $s := include "trainctl.scheduler" . | fromJson -}}
{{- if eq $s.name "scheduler-plugins" -}}{{ $s.schedulerPlugins.schedulerName }}{{- end -}}
{{- end -}}

{{/* The RayJob's labels for its gang scheduler, as KubeRay v1.7 documents each: KubeRay copies
the RayJob's labels to its RayCluster, and the operator's batch-scheduler plugin passes them on
to the pods. scheduler-plugins needs none: the chart renders its PodGroup ("trainctl.podgroup")
and labels the pods itself. Context: root, name (the RayJob's name). */}}
{{- define "trainctl.schedulerLabels" -}}
{{- $s := include "trainctl.scheduler" .root | fromJson -}}
{{- if eq $s.name "kueue" }}
kueue.x-k8s.io/queue-name: {{ $s.queue | quote }}
{{- with $s.priorityClass }}
kueue.x-k8s.io/priority-class: {{ . | quote }}
{{- end }}
{{- else if eq $s.name "volcano" }}
ray.io/scheduler-name: "volcano"
{{- with $s.queue }}
volcano.sh/queue-name: {{ . | quote }}
{{- end }}
{{- with $s.priorityClass }}
ray.io/priority-class-name: {{ . | quote }}
{{- end }}
{{- else if eq $s.name "yunikorn" }}
ray.io/gang-scheduling-enabled: "true"
{{- /* Unique cluster-wide, as YuniKorn wants: the same release in two namespaces has the same
RayJob names. */}}
yunikorn.apache.org/app-id: {{ printf "%s-%s" .name (sha256sum .root.Release.Namespace | trunc 8) | quote }}
{{- with $s.queue }}
yunikorn.apache.org/queue: {{ . | quote }}
{{- end }}
{{- else if eq $s.name "kai-scheduler" }}
kai.scheduler/queue: {{ $s.queue | quote }}
{{- with $s.priorityClass }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A pool with poolDefaults under it: a key set on the pool replaces the default's key.
(sprig's merge would treat false and 0 as unset and bring the defaults back.) */}}
{{- define "trainctl.pool" -}}
{{- $p := deepCopy .root.Values.poolDefaults -}}
{{- range $k, $v := .pool -}}{{- $_ := set $p $k $v -}}{{- end -}}
{{- toJson $p -}}
{{- end -}}

{{/* Pools to render, sorted by name: enabled ones only. Returns JSON {name: pool}. */}}
{{- define "trainctl.enabledPools" -}}
{{- $out := dict -}}
{{- range $name, $pool := .Values.nodePools -}}
{{- $p := include "trainctl.pool" (dict "root" $ "pool" ($pool | default dict)) | fromJson -}}
{{- if $p.enabled -}}{{- $_ := set $out $name $p -}}{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The RayJob (and ConfigMap, NetworkPolicy) name: <release>-<pool>-<hash8>, where the hash
covers the RayJob spec and the ConfigMap data rendered with an empty name, and with Kueue its
queue and priority class: they are labels, outside the spec, and Kueue refuses a changed queue
label on a RayJob that is not suspended, so every sync after a queue change failed; a new queue
is a new run instead, as a change of the spec is. (Other schedulers' labels may change on a
live RayJob: a re-queued run keeps its name and resumes.) */}}
{{- define "trainctl.runName" -}}
{{- $draft := dict "root" .root "pool" .pool "p" .p "train" .train "name" "" -}}
{{- $job := include "trainctl.rayjob" $draft | fromYaml -}}
{{- $cm := include "trainctl.configmap" $draft | fromYaml -}}
{{- if or (hasKey $job "Error") (hasKey $cm "Error") -}}
{{- fail (printf "internal error rendering pool %s: %v %v" .pool ($job.Error | default "") ($cm.Error | default "")) -}}
{{- end -}}
{{- $hashed := dict "spec" $job.spec "data" $cm.data -}}
{{- $s := include "trainctl.scheduler" .root | fromJson -}}
{{- if eq $s.name "kueue" -}}
{{- $_ := set $hashed "scheduler" (dict "name" $s.name "queue" ($s.queue | default "") "priorityClass" ($s.priorityClass | default "")) -}}
{{- end -}}
{{- $hash := include "trainctl.canon" $hashed | sha256sum | trunc 8 -}}
{{- $name := printf "%s-%s-%s" .root.Release.Name .pool $hash -}}
{{- if gt (len $name) 47 -}}
{{- fail (printf "RayJob name %q is %d characters; KubeRay allows at most 47: shorten the release name (%q) or the pool name (%q) so that release + pool is at most 37 characters" $name (len $name) .root.Release.Name .pool) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "RayJob name %q is not a valid DNS-1035 label: the release name must start with a lowercase letter and use only a-z, 0-9 and '-'" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}
