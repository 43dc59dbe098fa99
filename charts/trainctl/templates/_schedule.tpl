{{/* Mirrored by app/k8s/templates/schedule.yaml.j2. */}}
{{- define "trainctl.submitRbac" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name | quote }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "trainctl.labels" .root | nindent 4 }}
    app.kubernetes.io/component: schedule
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name | quote }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "trainctl.labels" .root | nindent 4 }}
    app.kubernetes.io/component: schedule
rules:
  # What `trainctl submit --wait` creates (every object of a pool's run) and follows.
  - apiGroups: ["ray.io"]
    resources: ["rayjobs"]
    verbs: ["get", "list", "watch", "create", "patch"]
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get", "list", "watch", "create", "patch"]
  # The claim is only ever created (then kept as it is), and the one ServiceAccount submit
  # applies is the chart's own: patch on it by name, so this pod cannot annotate another
  # account of the namespace (a cloud workload identity) with its rights.
  - apiGroups: [""]
    resources: ["persistentvolumeclaims", "serviceaccounts"]
    verbs: ["get", "list", "watch", "create"]
  {{- if .root.Values.serviceAccount.create }}
  - apiGroups: [""]
    resources: ["serviceaccounts"]
    resourceNames: [{{ include "trainctl.serviceAccountName" .root | quote }}]
    verbs: ["patch"]
  {{- end }}
  {{- if and .root.Values.rayAuth.enabled (not .root.Values.rayAuth.existingSecret) }}
  # The Ray token Secret this chart creates, by name: submit checks that it is there and keeps
  # it. No other Secret of the namespace is readable from this pod, and none can be created
  # (a created token Secret for another ServiceAccount would hand over its token).
  - apiGroups: [""]
    resources: ["secrets"]
    resourceNames: [{{ include "trainctl.authSecretName" .root | quote }}]
    verbs: ["get"]
  {{- end }}
  - apiGroups: ["networking.k8s.io"]
    resources: ["networkpolicies"]
    verbs: ["get", "list", "watch", "create", "patch"]
  {{- if include "trainctl.podSchedulerName" .root }}
  - apiGroups: ["scheduling.x-k8s.io"]
    resources: ["podgroups"]
    verbs: ["get", "list", "watch", "create", "patch"]
  {{- end }}
  - apiGroups: [""]
    resources: ["pods", "pods/log", "events"]
    verbs: ["get", "list"]
  # Read only: Kueue's admission state, for the "why is it stuck" lines of --wait.
  - apiGroups: ["kueue.x-k8s.io"]
    resources: ["workloads"]
    verbs: ["get", "list"]
  {{- if and .root.Values.metrics.enabled .root.Values.metrics.podMonitor.enabled }}
  - apiGroups: ["monitoring.coreos.com"]
    resources: ["podmonitors"]
    verbs: ["get", "list", "watch", "create", "patch"]
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name | quote }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "trainctl.labels" .root | nindent 4 }}
    app.kubernetes.io/component: schedule
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name | quote }}
subjects:
  - kind: ServiceAccount
    name: {{ .name | quote }}
    namespace: {{ .root.Release.Namespace | quote }}
{{- end -}}

{{- define "trainctl.cronjob" -}}
{{- $v := .root.Values -}}
{{- $s := $v.schedule -}}
apiVersion: batch/v1
kind: CronJob
metadata:
  name: {{ printf "%s-%s-retrain" .root.Release.Name .pool | quote }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "trainctl.labels" .root | nindent 4 }}
    app.kubernetes.io/component: schedule
    trainctl.io/pool: {{ .pool | quote }}
spec:
  schedule: {{ $s.cron | quote }}
  {{- with $s.timeZone }}
  timeZone: {{ . | quote }}
  {{- end }}
  concurrencyPolicy: {{ $s.concurrencyPolicy | default "Forbid" | quote }}
  successfulJobsHistoryLimit: 3
  failedJobsHistoryLimit: 3
  jobTemplate:
    spec:
      # Retrying is safe: a retried pod computes the same RayJob name (the run tag is this Job's
      # name) and attaches to the run already going instead of starting a second one.
      backoffLimit: 3
      podFailurePolicy:
        rules:
          # 1: the run failed, 2: invalid values or ValidationFailed; a retry would say the same.
          - action: FailJob
            onExitCodes:
              containerName: submit
              operator: In
              values: [1, 2]
          # An evicted or preempted pod (node drain) does not use up a retry.
          - action: Ignore
            onPodConditions:
              - type: DisruptionTarget
                status: "True"
      template:
        metadata:
          labels:
            {{- include "trainctl.commonLabels" .root | nindent 12 }}
            app.kubernetes.io/component: schedule
            trainctl.io/pool: {{ .pool | quote }}
        spec:
          restartPolicy: Never
          serviceAccountName: {{ .sa | quote }}
          # submit talks to the Kubernetes API, so this pod (unlike the Ray pods) has a token.
          automountServiceAccountToken: true
          securityContext:
            {{- include "trainctl.podSecurityContext" . | nindent 12 }}
          {{- with $v.imagePullSecrets }}
          imagePullSecrets:
          {{- range . }}
            - name: {{ include "trainctl.pullSecretName" . | quote }}
          {{- end }}
          {{- end }}
          containers:
            - name: submit
              image: {{ include "trainctl.image" .root | quote }}
              imagePullPolicy: {{ $v.image.pullPolicy | quote }}
              # The run tag is this Job's name (<cronjob>-<scheduled minute>), folded into the
              # content hash: each scheduled time is a new RayJob, and every pod of one Job (a
              # retry) renders the same name. Empty (no job-name label, Kubernetes < 1.27), submit
              # exits 2 rather than attach to the untagged run.
              command: ["trainctl"]
              args:
                - submit
                - --wait
                - --values=/etc/trainctl/values.json
                - {{ printf "--pool=%s" .pool | quote }}
                - {{ printf "--namespace=%s" .root.Release.Namespace | quote }}
                - {{ printf "--release=%s" .root.Release.Name | quote }}
                - --run-tag=$(RUN_TAG)
                {{- if not (include "trainctl.objectStore" .root) }}
                # The run folder, read-only, for the epoch lines and the last line: the
                # promotion outcome (a bucket is read directly).
                - {{ printf "--storage-mount=%s" (include "trainctl.mountPath" .root) | quote }}
                {{- end }}
              {{- if and (eq $v.storage.type "s3") $v.storage.credentialsSecret }}
              # The bucket's credentials, as the Ray pods have them: --wait reads the run's
              # records (its epochs, its promotion) from the bucket itself.
              envFrom:
                - secretRef:
                    name: {{ $v.storage.credentialsSecret | quote }}
              {{- end }}
              env:
                # The root filesystem is read-only: anything a library keeps under $HOME goes
                # to the pod's own scratch folder.
                - name: HOME
                  value: /tmp
                - name: RUN_TAG
                  valueFrom:
                    fieldRef:
                      fieldPath: metadata.labels['batch.kubernetes.io/job-name']
                {{- if eq $v.storage.type "s3" }}
                {{- with $v.storage.region }}
                - name: AWS_REGION
                  value: {{ . | quote }}
                {{- end }}
                {{- else if and (eq $v.storage.type "gcs") $v.storage.credentialsSecret }}
                - name: GOOGLE_APPLICATION_CREDENTIALS
                  value: "/var/run/secrets/trainctl/gcs/key.json"
                {{- end }}
              resources:
                {{- include "trainctl.resources" $s.resources | nindent 16 }}
              securityContext:
                {{- include "trainctl.containerSecurityContext" . | nindent 16 }}
                readOnlyRootFilesystem: true
              volumeMounts:
                - name: scratch
                  mountPath: /tmp
                - name: values
                  mountPath: /etc/trainctl
                  readOnly: true
                {{- if not (include "trainctl.objectStore" .root) }}
                - name: shared
                  mountPath: {{ include "trainctl.mountPath" .root | quote }}
                  readOnly: true
                {{- else if and (eq $v.storage.type "gcs") $v.storage.credentialsSecret }}
                - name: gcs-credentials
                  mountPath: /var/run/secrets/trainctl/gcs
                  readOnly: true
                {{- end }}
          volumes:
            # submit runs no Ray: unlike the Ray pods' (CKV_K8S_22), its root filesystem is
            # read-only, with a small scratch folder for temporary files.
            - name: scratch
              emptyDir:
                sizeLimit: 64Mi
            - name: values
              configMap:
                name: {{ printf "%s-values" .root.Release.Name | quote }}
            {{- if not (include "trainctl.objectStore" .root) }}
            - name: shared
              persistentVolumeClaim:
                claimName: {{ include "trainctl.claimName" .root | quote }}
                readOnly: true
            {{- else if and (eq $v.storage.type "gcs") $v.storage.credentialsSecret }}
            # The service account key (key.json), readable by the pod's group (fsGroup) only.
            - name: gcs-credentials
              secret:
                secretName: {{ $v.storage.credentialsSecret | quote }}
                defaultMode: 288
            {{- end }}
{{- end -}}
