{{/*
One pool's objects. Context: dict root ($), pool (name), p (pool over poolDefaults),
train (merged TRAIN_* map) and name (the RayJob name; "" while hashing).
Mirrored by app/k8s/templates/{rayjob,configmap,networkpolicy}.yaml.j2.
*/}}

{{- define "trainctl.podLabels" -}}
{{ include "trainctl.commonLabels" .root }}
app.kubernetes.io/component: {{ .component | quote }}
trainctl.io/pool: {{ .pool | quote }}
trainctl.io/run: {{ .name | quote }}
{{- with .root.Values.runTag }}
trainctl.io/run-tag: {{ . | quote }}
{{- end }}
{{- if and (ne .component "ray-submitter") (include "trainctl.podSchedulerName" .root) }}
scheduling.x-k8s.io/pod-group: {{ .name | quote }}
{{- end }}
{{- end -}}

{{- define "trainctl.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 1000
runAsGroup: 100
fsGroup: 100
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "trainctl.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Pod-spec fields shared by head and workers (not the containers). */}}
{{- define "trainctl.podCommon" -}}
serviceAccountName: {{ include "trainctl.serviceAccountName" .root | quote }}
automountServiceAccountToken: false
# Time from the notice (preStop, SIGTERM) to SIGKILL: enough for one checkpoint.
terminationGracePeriodSeconds: {{ int .root.Values.preemption.gracePeriodSeconds }}
{{- with include "trainctl.podPriorityClass" .root }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with include "trainctl.podSchedulerName" .root }}
schedulerName: {{ . | quote }}
{{- end }}
securityContext:
  {{- include "trainctl.podSecurityContext" . | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ include "trainctl.pullSecretName" . | quote }}
{{- end }}
{{- end }}
volumes:
  {{- if not (include "trainctl.objectStore" .root) }}
  - name: shared
    persistentVolumeClaim:
      claimName: {{ include "trainctl.claimName" .root | quote }}
  {{- else if and (eq .root.Values.storage.type "gcs") .root.Values.storage.credentialsSecret }}
  # The service account key (key.json), readable by the pod's group (fsGroup) only.
  - name: gcs-credentials
    secret:
      secretName: {{ .root.Values.storage.credentialsSecret | quote }}
      defaultMode: 288
  {{- end }}
  - name: dshm
    emptyDir:
      medium: Memory
      sizeLimit: {{ include "trainctl.str" .root.Values.sharedMemorySize | quote }}
  {{- if and (eq .component "ray-head") .root.Values.tune.enabled }}
  # The sweep's search space (tune.space), from the run's ConfigMap: `trainctl tune` runs here.
  - name: tune-space
    configMap:
      name: {{ .name | quote }}
      items:
        - key: tune_space.yaml
          path: space.yaml
  {{- end }}
  {{- if and (eq .component "ray-head") .root.Values.signing.secretName }}
  # The export-signing key pair (signing.pem, verify.pem), readable by the pod's group only:
  # the driver on the head signs exports and checks what it loads (README "Signed exports").
  - name: signing-keys
    secret:
      secretName: {{ .root.Values.signing.secretName | quote }}
      defaultMode: 288
      items:
        - key: signing.pem
          path: signing.pem
        - key: verify.pem
          path: verify.pem
  {{- end }}
  {{- if and (eq .component "ray-head") (include "trainctl.autoscaling" .root) }}
  # API credentials for KubeRay's autoscaler container only (autoscalerOptions.volumeMounts):
  # the Ray containers mount no token.
  - name: autoscaler-token
    projected:
      defaultMode: 288
      sources:
        - serviceAccountToken:
            path: token
            expirationSeconds: 3600
        - configMap:
            name: kube-root-ca.crt
            items:
              - key: ca.crt
                path: ca.crt
  {{- end }}
{{- end -}}

{{/* Container fields shared by head and workers: image, env, mounts, security. */}}
{{- define "trainctl.rayContainerCommon" -}}
image: {{ include "trainctl.image" .root | quote }}
imagePullPolicy: {{ .root.Values.image.pullPolicy | quote }}
envFrom:
  - configMapRef:
      name: {{ .name | quote }}
{{- if and (eq .root.Values.storage.type "s3") .root.Values.storage.credentialsSecret }}
  # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) for the bucket.
  - secretRef:
      name: {{ .root.Values.storage.credentialsSecret | quote }}
{{- end }}
{{- range .root.Values.secretEnvFrom }}
  - secretRef:
      name: {{ . | quote }}
{{- end }}
{{- with .root.Values.secretEnv }}
env:
{{- range . }}
  - name: {{ .name | quote }}
    valueFrom:
      secretKeyRef:
        name: {{ .secretName | quote }}
        key: {{ .key | quote }}
{{- end }}
{{- end }}
volumeMounts:
  {{- if not (include "trainctl.objectStore" .root) }}
  - name: shared
    mountPath: {{ include "trainctl.mountPath" .root | quote }}
  {{- else if and (eq .root.Values.storage.type "gcs") .root.Values.storage.credentialsSecret }}
  - name: gcs-credentials
    mountPath: /var/run/secrets/trainctl/gcs
    readOnly: true
  {{- end }}
  - name: dshm
    mountPath: /dev/shm
  {{- if and (eq .component "ray-head") .root.Values.tune.enabled }}
  # One file, not the folder: a ConfigMap folder's files are links, which trainctl never reads.
  - name: tune-space
    mountPath: /etc/trainctl/tune-space.yaml
    subPath: space.yaml
    readOnly: true
  {{- end }}
  {{- if and (eq .component "ray-head") .root.Values.signing.secretName }}
  # Each key as a file of its own (subPath): a Secret folder's files are links, never read.
  - name: signing-keys
    mountPath: /etc/trainctl/signing/signing.pem
    subPath: signing.pem
    readOnly: true
  - name: signing-keys
    mountPath: /etc/trainctl/signing/verify.pem
    subPath: verify.pem
    readOnly: true
  {{- end }}
securityContext:
  {{- include "trainctl.containerSecurityContext" . | nindent 2 }}
{{- end -}}

{{/* Annotations of a run's RayJob, ConfigMap and NetworkPolicy. `keep`: `helm upgrade` to a
changed config, and `helm uninstall`, leave these objects in place, so a run in flight keeps its
settings and network policy (a restarted pod or a backoffLimit retry needs the ConfigMap) and a
finished run's RayJob stays as its record; its Ray cluster still goes after the job (shutdown
and TTL). runAnnotations are added, and win on the same key. Each value is quoted here rather
than written by toYaml, which puts U+2028 and U+2029 raw into a block scalar, where `nindent`
leaves the next line unindented. */}}
{{- define "trainctl.runAnnotations" -}}
{{- $ann := dict "helm.sh/resource-policy" "keep" -}}
{{- range $k, $v := .root.Values.runAnnotations }}{{ $_ := set $ann $k $v }}{{ end -}}
{{- range $i, $k := keys $ann | sortAlpha }}{{ if $i }}{{ "\n" }}{{ end }}{{ $k | quote }}: {{ get $ann $k | quote }}{{ end -}}
{{- end -}}

{{- define "trainctl.configmap" -}}
{{- $v := .root.Values -}}
{{- $p := .p -}}
{{- $gpus := int $p.gpusPerWorker -}}
{{- $root := include "trainctl.storageRoot" .root -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .name | quote }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "trainctl.labels" .root | nindent 4 }}
    app.kubernetes.io/component: settings
    trainctl.io/pool: {{ .pool | quote }}
  annotations:
    {{- include "trainctl.runAnnotations" . | nindent 4 }}
data:
  {{- range $k, $val := .train }}
  {{ printf "TRAIN_%s" (upper $k) | quote }}: {{ include "trainctl.str" $val | quote }}
  {{- end }}
  {{- $workers := ternary (mul (int $p.replicas) $gpus) (int $p.replicas) (gt $gpus 0) }}
  {{- if and $v.tune.enabled (gt (int $v.tune.workersPerTrial) 0) }}
  {{- $workers = int $v.tune.workersPerTrial }}
  {{- end }}
  TRAIN_NUM_WORKERS: {{ $workers | quote }}
  TRAIN_USE_GPU: {{ ternary "true" "false" (gt $gpus 0) | quote }}
  {{- with $p.acceleratorType }}
  TRAIN_ACCELERATOR_TYPE: {{ . | quote }}
  {{- end }}
  TRAIN_RUN_NAME: {{ .name | quote }}
  TRAIN_STORAGE_PATH: {{ printf "%s/%s" $root $v.storage.runsSubPath | quote }}
  TRAIN_DATA_PATH: {{ printf "%s/%s" $root $v.storage.dataSubPath | quote }}
  {{- if $v.signing.secretName }}
  TRAIN_SIGNING_KEY: "/etc/trainctl/signing/signing.pem"
  TRAIN_VERIFY_KEY: "/etc/trainctl/signing/verify.pem"
  {{- end }}
  {{- if $v.tune.enabled }}
  TRAIN_TUNE_SPACE: "/etc/trainctl/tune-space.yaml"
  TRAIN_TUNE_SAMPLES: {{ int $v.tune.samples | quote }}
  TRAIN_TUNE_CONCURRENT: {{ int $v.tune.concurrent | quote }}
  TRAIN_TUNE_SCHEDULER: {{ $v.tune.scheduler | quote }}
  TRAIN_TUNE_GRACE_PERIOD: {{ int $v.tune.gracePeriod | quote }}
  TRAIN_TUNE_REDUCTION_FACTOR: {{ int $v.tune.reductionFactor | quote }}
  tune_space.yaml: {{ toJson $v.tune.space | quote }}
  {{- end }}
  {{- if eq $v.storage.type "s3" }}
  {{- with $v.storage.endpoint }}
  TRAIN_STORAGE_ENDPOINT: {{ . | quote }}
  {{- end }}
  {{- with $v.storage.region }}
  AWS_REGION: {{ . | quote }}
  {{- end }}
  {{- else if and (eq $v.storage.type "gcs") $v.storage.credentialsSecret }}
  GOOGLE_APPLICATION_CREDENTIALS: "/var/run/secrets/trainctl/gcs/key.json"
  {{- end }}
  {{- range $k, $val := $v.env }}
  {{ $k | quote }}: {{ $val | quote }}
  {{- end }}
{{- end -}}

{{/* scheduler-plugins: the RayJob's gang, for the coscheduling plugin, which binds none of
its pods until it can bind minMember of them. KubeRay's own scheduler-plugins integration takes
RayClusters only (v1.7 answers a RayJob with "currently only RayCluster is supported" and leaves
it Initializing), so the chart renders the PodGroup, named as the run, and labels the head and
worker pod templates with it ("trainctl.podLabels"); the submitter pod is not in the gang. Kept
like the run's other objects: a pod of the run that is recreated later (a spot reclaim) is only
scheduled while its PodGroup exists. minResources holds the GPUs alone, the one total the chart
can add up exactly (CPU and memory are Kubernetes quantities in any unit). */}}
{{- define "trainctl.podgroup" -}}
{{- $v := .root.Values -}}
{{- $s := include "trainctl.scheduler" .root | fromJson -}}
{{- $gpus := int .p.gpusPerWorker -}}
{{- $members := add1 (int .p.replicas) -}}
{{- $d := $v.dataPool -}}
{{- if and $d.enabled $d.autoscaling }}{{ $members = add $members (int $d.minReplicas) }}
{{- else if $d.enabled }}{{ $members = add $members (int $d.replicas) }}{{ end -}}
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: {{ .name | quote }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "trainctl.labels" .root | nindent 4 }}
    app.kubernetes.io/component: gang
    trainctl.io/pool: {{ .pool | quote }}
  annotations:
    {{- include "trainctl.runAnnotations" . | nindent 4 }}
spec:
  # The head, the pool's workers and the data pool's: all of them, or none.
  minMember: {{ $members }}
  {{- if gt $gpus 0 }}
  minResources:
    {{ $v.gpuResourceName | quote }}: {{ mul (int .p.replicas) $gpus | quote }}
  {{- end }}
  scheduleTimeoutSeconds: {{ int $s.schedulerPlugins.scheduleTimeoutSeconds }}
{{- end -}}

{{- define "trainctl.rayjob" -}}
{{- $v := .root.Values -}}
{{- $p := .p -}}
{{- $job := $v.rayJob -}}
{{- $gpus := int $p.gpusPerWorker -}}
{{- $head := dict "root" .root "pool" .pool "name" .name "component" "ray-head" -}}
{{- $worker := dict "root" .root "pool" .pool "name" .name "component" "ray-worker" -}}
{{- $submitter := dict "root" .root "pool" .pool "name" .name "component" "ray-submitter" -}}
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: {{ .name | quote }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "trainctl.labels" .root | nindent 4 }}
    app.kubernetes.io/component: rayjob
    trainctl.io/pool: {{ .pool | quote }}
    {{- with include "trainctl.schedulerLabels" . | trim }}{{ . | nindent 4 }}{{ end }}
  annotations:
    {{- include "trainctl.runAnnotations" . | nindent 4 }}
    {{- if and (eq (include "trainctl.scheduler" .root | fromJson).name "kueue") (not (hasKey $v.runAnnotations "kustomize.toolkit.fluxcd.io/ssa")) }}
    {{- /* Kueue admits the RayJob by setting spec.suspend to false; Flux's drift correction
           would write the manifest's true back at each interval, and KubeRay would tear the
           running cluster down. Created once, never updated: a changed config is a new name. */}}
    kustomize.toolkit.fluxcd.io/ssa: "IfNotPresent"
    {{- end }}
spec:
  entrypoint: {{ ternary $v.tune.entrypoint $job.entrypoint (eq $v.tune.enabled true) | quote }}
  {{- with $job.runtimeEnv }}
  runtimeEnvYAML: {{ toJson . | quote }}
  {{- end }}
  submissionMode: {{ $job.submissionMode | quote }}
  backoffLimit: {{ int $job.backoffLimit }}
  {{- with $job.preRunningDeadlineSeconds }}
  preRunningDeadlineSeconds: {{ int . }}
  {{- end }}
  {{- with $job.activeDeadlineSeconds }}
  activeDeadlineSeconds: {{ int . }}
  {{- end }}
  shutdownAfterJobFinishes: {{ $job.shutdownAfterJobFinishes }}
  {{- if $job.shutdownAfterJobFinishes }}
  ttlSecondsAfterFinished: {{ int $job.ttlSecondsAfterFinished }}
  {{- end }}
  {{- with $job.deletionStrategy }}
  deletionStrategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if eq (include "trainctl.scheduler" .root | fromJson).name "kueue" }}
  suspend: true
  {{- end }}
  {{- if eq $job.submissionMode "K8sJobMode" }}
  submitterPodTemplate:
    metadata:
      labels:
        {{- include "trainctl.podLabels" $submitter | nindent 8 }}
    spec:
      restartPolicy: Never
      serviceAccountName: {{ include "trainctl.serviceAccountName" .root | quote }}
      automountServiceAccountToken: false
      {{- with include "trainctl.podPriorityClass" .root }}
      priorityClassName: {{ . | quote }}
      {{- end }}
      securityContext:
        {{- include "trainctl.podSecurityContext" . | nindent 8 }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
      {{- range . }}
        - name: {{ include "trainctl.pullSecretName" . | quote }}
      {{- end }}
      {{- end }}
      containers:
        - name: ray-job-submitter
          image: {{ include "trainctl.image" .root | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy | quote }}
          resources:
            {{- include "trainctl.resources" $job.submitter.resources | nindent 12 }}
          securityContext:
            {{- include "trainctl.containerSecurityContext" . | nindent 12 }}
  {{- end }}
  rayClusterSpec:
    rayVersion: {{ $v.rayVersion | quote }}
    {{- if include "trainctl.autoscaling" .root }}
    # Only the data group autoscales: the GPU groups' min and max equal their replicas.
    enableInTreeAutoscaling: true
    autoscalerOptions:
      version: v2
      upscalingMode: Default
      idleTimeoutSeconds: {{ int $v.dataPool.idleTimeoutSeconds }}
      imagePullPolicy: {{ $v.image.pullPolicy | quote }}
      resources:
        {{- include "trainctl.resources" $v.dataPool.autoscaler.resources | nindent 8 }}
      securityContext:
        {{- include "trainctl.containerSecurityContext" . | nindent 8 }}
      volumeMounts:
        - name: autoscaler-token
          mountPath: /var/run/secrets/kubernetes.io/serviceaccount
          readOnly: true
    {{- else }}
    enableInTreeAutoscaling: false
    {{- end }}
    {{- if $v.rayAuth.enabled }}
    authOptions:
      mode: token
      secretName: {{ include "trainctl.authSecretName" .root | quote }}
    {{- end }}
    {{- with $v.rayJob.historyServerOptions }}
    historyServerOptions:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    headGroupSpec:
      {{- with $v.head.rayStartParams }}
      rayStartParams:
        {{- range $k, $val := . }}
        {{ $k | quote }}: {{ $val | quote }}
        {{- end }}
      {{- else }}
      rayStartParams: {}
      {{- end }}
      template:
        metadata:
          {{- with $v.head.annotations }}
          annotations:
            {{- range $k, $val := . }}
            {{ $k | quote }}: {{ $val | quote }}
            {{- end }}
          {{- end }}
          labels:
            {{- include "trainctl.podLabels" $head | nindent 12 }}
        spec:
          {{- include "trainctl.podCommon" $head | nindent 10 }}
          {{- with $v.head.nodeSelector }}
          nodeSelector:
            {{- range $k, $val := . }}
            {{ $k | quote }}: {{ $val | quote }}
            {{- end }}
          {{- end }}
          {{- with $v.head.tolerations }}
          tolerations:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          containers:
            - name: ray-head
              {{- include "trainctl.rayContainerCommon" $head | nindent 14 }}
              ports:
                - name: gcs-server
                  containerPort: 6379
                - name: dashboard
                  containerPort: 8265
                - name: client
                  containerPort: 10001
                {{- if $v.metrics.enabled }}
                - name: metrics
                  containerPort: 8080
                {{- end }}
              resources:
                requests:
                  cpu: {{ include "trainctl.str" $v.head.cpu | quote }}
                  memory: {{ include "trainctl.str" $v.head.memory | quote }}
                limits:
                  cpu: {{ include "trainctl.str" $v.head.cpu | quote }}
                  memory: {{ include "trainctl.str" $v.head.memory | quote }}
    workerGroupSpecs:
      {{- $gpu := dict "root" .root "pool" .pool "name" .name "group" .pool "g" $p "gpus" $gpus -}}
      {{- $_ := set $gpu "replicas" (int $p.replicas) -}}
      {{- $_ := set $gpu "min" (int $p.replicas) -}}
      {{- $_ := set $gpu "max" (int $p.replicas) -}}
      {{- with $p.acceleratorType }}
      {{- $_ := set $gpu "resources" (dict (printf "accelerator_type:%s" .) "1") -}}
      {{- end }}
      {{- include "trainctl.workerGroup" $gpu | nindent 6 }}
      {{- with $v.dataPool }}
      {{- if .enabled }}
      {{- $data := dict "root" $.root "pool" $.pool "name" $.name "group" "data" "g" . "gpus" 0 -}}
      {{- $_ := set $data "rayLabels" (dict "trainctl.io/role" "data") -}}
      {{- if .autoscaling }}
      {{- $_ := set $data "replicas" (int .minReplicas) -}}
      {{- $_ := set $data "min" (int .minReplicas) -}}
      {{- $_ := set $data "max" (int .maxReplicas) -}}
      {{- else }}
      {{- $_ := set $data "replicas" (int .replicas) -}}
      {{- $_ := set $data "min" (int .replicas) -}}
      {{- $_ := set $data "max" (int .replicas) -}}
      {{- end }}
      {{- include "trainctl.workerGroup" $data | nindent 6 }}
      {{- end }}
      {{- end }}
{{- end -}}

{{/* One worker group: a RayJob's GPU pool, or the data pool (dataPool). Context: root, pool,
name, group (groupName), g (the group's settings: nodeSelector, tolerations, affinity, cpusPerWorker,
memoryPerWorker, spot), gpus, replicas, min, max, and optionally resources (Ray custom
resources) and rayLabels (Ray node labels). */}}
{{- define "trainctl.workerGroup" -}}
{{- $v := .root.Values -}}
{{- $g := .g -}}
{{- $gpus := int .gpus -}}
{{- $worker := dict "root" .root "pool" .pool "name" .name "component" "ray-worker" -}}
- groupName: {{ .group | quote }}
  replicas: {{ .replicas }}
  minReplicas: {{ .min }}
  maxReplicas: {{ .max }}
  rayStartParams: {}
  {{- with .resources }}
  resources:
    {{- range $k, $val := . }}
    {{ $k | quote }}: {{ $val | quote }}
    {{- end }}
  {{- end }}
  {{- with .rayLabels }}
  labels:
    {{- range $k, $val := . }}
    {{ $k | quote }}: {{ $val | quote }}
    {{- end }}
  {{- end }}
  template:
    metadata:
      labels:
        {{- include "trainctl.podLabels" $worker | nindent 8 }}
        {{- /* The Ray node labels as pod labels too: a selector tells data pods from GPU ones. */}}
        {{- range $k, $val := .rayLabels }}
        {{ $k | quote }}: {{ $val | quote }}
        {{- end }}
        {{- if $g.spot }}
        trainctl.io/spot: "true"
        {{- end }}
    spec:
      {{- include "trainctl.podCommon" $worker | nindent 6 }}
      {{- with $g.nodeSelector }}
      nodeSelector:
        {{- range $k, $val := . }}
        {{ $k | quote }}: {{ $val | quote }}
        {{- end }}
      {{- end }}
      {{- with $g.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $g.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: ray-worker
          {{- include "trainctl.rayContainerCommon" $worker | nindent 10 }}
          {{- if $g.spot }}
          {{- $grace := int $v.preemption.gracePeriodSeconds }}
          # Spot: drain this pod's Ray node (reason preemption) before SIGTERM, so training
          # checkpoints; the hook ends within the grace period (docs/kubernetes.md).
          lifecycle:
            preStop:
              exec:
                command:
                  - timeout
                  - -k
                  - "1"
                  - {{ sub $grace 2 | quote }}
                  - python
                  - -m
                  - app.k8s.drain_hook
                  - --deadline-remaining-seconds
                  - {{ sub $grace 5 | quote }}
          {{- end }}
          {{- if $v.metrics.enabled }}
          ports:
            - name: metrics
              containerPort: 8080
          {{- end }}
          resources:
            requests:
              cpu: {{ include "trainctl.str" $g.cpusPerWorker | quote }}
              memory: {{ include "trainctl.str" $g.memoryPerWorker | quote }}
              {{- if gt $gpus 0 }}
              {{ $v.gpuResourceName | quote }}: {{ $gpus | quote }}
              {{- end }}
            limits:
              cpu: {{ include "trainctl.str" $g.cpusPerWorker | quote }}
              memory: {{ include "trainctl.str" $g.memoryPerWorker | quote }}
              {{- if gt $gpus 0 }}
              {{ $v.gpuResourceName | quote }}: {{ $gpus | quote }}
              {{- end }}
{{- end -}}

{{/* requests/limits with every quantity as a string. */}}
{{- define "trainctl.resources" -}}
{{- range $kind := list "requests" "limits" }}
{{ $kind | quote }}:
{{- range $k, $q := get $ $kind }}
  {{ $k | quote }}: {{ include "trainctl.str" $q | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "trainctl.networkpolicy" -}}
{{- $v := .root.Values -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ .name | quote }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "trainctl.labels" .root | nindent 4 }}
    app.kubernetes.io/component: network-policy
    trainctl.io/pool: {{ .pool | quote }}
  annotations:
    {{- include "trainctl.runAnnotations" . | nindent 4 }}
spec:
  # The Ray ports (GCS, dashboard/job API, client, raylet and worker ports) of this run's pods
  # take traffic only from this run's own pods, plus the dashboard from dashboardFrom.
  podSelector:
    matchLabels:
      trainctl.io/run: {{ .name | quote }}
  policyTypes: ["Ingress"]
  ingress:
    - from:
        - podSelector:
            matchLabels:
              trainctl.io/run: {{ .name | quote }}
    {{- with $v.networkPolicy.dashboardFrom }}
    - from:
        {{- toYaml . | nindent 8 }}
      ports:
        - protocol: TCP
          port: 8265
    {{- end }}
    {{- if $v.metrics.enabled }}
    # Ray's metrics port, for the named scraper only.
    - from:
        - namespaceSelector:
            {{- toYaml $v.metrics.scraper.namespaceSelector | nindent 12 }}
          podSelector:
            {{- toYaml $v.metrics.scraper.podSelector | nindent 12 }}
      ports:
        - protocol: TCP
          port: 8080
    {{- end }}
{{- end -}}
