{{/*
KubeRay, Kueue and batch-scheduler rules the schema cannot express, refused at render with the
fix in the message. app/k8s/rules.py holds the same rules for `trainctl render` (same messages).
*/}}
{{- define "trainctl.checks" -}}
{{- $job := .Values.rayJob -}}
{{- $scheduler := (include "trainctl.scheduler" . | fromJson).name -}}
{{- $data := .Values.dataPool -}}
{{- if and (.Values.kueue | default dict).enabled .Values.scheduler.name -}}
{{- fail (printf "kueue.enabled=true and scheduler.name=%s both choose the gang scheduler: the kueue block is deprecated, remove it (%s)" .Values.scheduler.name (include "trainctl.kueueMoved" .)) -}}
{{- end -}}
{{- if and (eq $scheduler "kueue") (not $job.shutdownAfterJobFinishes) -}}
{{- fail "scheduler.name=kueue needs rayJob.shutdownAfterJobFinishes=true: Kueue creates RayJobs suspended, and KubeRay refuses to suspend one that keeps its cluster" -}}
{{- end -}}
{{- if and (eq $scheduler "kai-scheduler") (ne $job.submissionMode "HTTPMode") -}}
{{- fail "scheduler.name=kai-scheduler needs rayJob.submissionMode=HTTPMode: KubeRay v1.7's KAI plugin refuses K8sJobMode RayJobs, whose submitter pod would start only after the gang" -}}
{{- end -}}
{{- if and $data.enabled $data.autoscaling -}}
{{- if eq $scheduler "kueue" -}}
{{- fail "dataPool.autoscaling cannot work with scheduler.name=kueue: Kueue admits a RayJob once, at the size it asks for, and does not support autoscaling RayJobs; give the data pool a fixed size (dataPool.autoscaling: false, dataPool.replicas)" -}}
{{- end -}}
{{- if eq $scheduler "scheduler-plugins" -}}
{{- fail "dataPool.autoscaling cannot work with scheduler.name=scheduler-plugins: the chart's PodGroup fixes the gang's size (minMember) when the RayJob is created, and data nodes the autoscaler adds later would be scheduled outside it; give the data pool a fixed size (dataPool.autoscaling: false, dataPool.replicas)" -}}
{{- end -}}
{{- if gt (int $data.minReplicas) (int $data.maxReplicas) -}}
{{- fail (printf "dataPool.minReplicas (%d) is above dataPool.maxReplicas (%d)" (int $data.minReplicas) (int $data.maxReplicas)) -}}
{{- end -}}
{{- end -}}
{{- if and $data.enabled (hasKey (include "trainctl.enabledPools" . | fromJson) "data") -}}
{{- fail "nodePools.data: with dataPool.enabled every RayJob has a worker group named data for the data pool; give the pool another name" -}}
{{- end -}}
{{- if and (not $job.shutdownAfterJobFinishes) (gt (int ($job.ttlSecondsAfterFinished | default 0)) 0) -}}
{{- fail "rayJob.ttlSecondsAfterFinished needs rayJob.shutdownAfterJobFinishes=true (KubeRay refuses a TTL on a RayJob that keeps its cluster); set the TTL to 0" -}}
{{- end -}}
{{- if and $job.shutdownAfterJobFinishes ($job.deletionStrategy | default dict).deletionRules -}}
{{- fail "rayJob.deletionStrategy.deletionRules and rayJob.shutdownAfterJobFinishes=true are mutually exclusive in KubeRay: set shutdownAfterJobFinishes to false and ttlSecondsAfterFinished to 0" -}}
{{- end -}}
{{- range .Values.schedule.pools -}}
{{- if not (hasKey $.Values.nodePools .) -}}
{{- fail (printf "schedule.pools names %q, which is not in nodePools (%s)" . (keys $.Values.nodePools | sortAlpha | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
