{{/*
KubeRay and Kueue rules the schema cannot express, refused at render with the fix in the
message. app/k8s/rules.py holds the same rules for `trainctl render` (same messages).
*/}}
{{- define "trainctl.checks" -}}
{{- $job := .Values.rayJob -}}
{{- if and .Values.kueue.enabled (not $job.shutdownAfterJobFinishes) -}}
{{- fail "kueue.enabled needs rayJob.shutdownAfterJobFinishes=true: Kueue creates RayJobs suspended, and KubeRay refuses to suspend one that keeps its cluster" -}}
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
