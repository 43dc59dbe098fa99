{{/*
KubeRay, Kueue and batch-scheduler rules the schema cannot express, refused at render with the
fix in the message. app/k8s/rules.py holds the same rules for `trainctl render` (same messages).
*/}}
{{- define "trainctl.checks" -}}
{{- /* Helm renders any namespace; the API server would refuse every object at apply time. */ -}}
{{- $ns := .Release.Namespace -}}
{{- if or (gt (len $ns) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $ns)) -}}
{{- fail (printf "namespace %s must be a DNS-1123 label" (squote $ns)) -}}
{{- end -}}
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
{{- if eq (include "trainctl.serviceAccountName" .) "default" -}}
{{- fail "dataPool.autoscaling with the namespace's default ServiceAccount: KubeRay binds its autoscaler's Role (create and delete the namespace's pods) to the head's account, so every pod running as default there would get those rights; let the chart create one (serviceAccount.create: true, name empty) or name another (serviceAccount.name)" -}}
{{- end -}}
{{- if eq (int $data.minReplicas) 0 -}}
{{- fail "dataPool.minReplicas is 0: a run that starts with no data node up decodes on the training nodes for the whole run, and no task then asks the autoscaler for a data node, so the pool is never used; set dataPool.minReplicas to 1 or more" -}}
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
{{- $enabled := include "trainctl.enabledPools" . | fromJson -}}
{{- range .Values.schedule.pools -}}
{{- if not (hasKey $.Values.nodePools .) -}}
{{- fail (printf "schedule.pools names %q, which is not in nodePools (%s)" . (keys $.Values.nodePools | sortAlpha | join ", ")) -}}
{{- else if and $.Values.schedule.enabled (not (hasKey $enabled .)) -}}
{{- fail (printf "schedule.pools names %q, whose pool is disabled (nodePools.%s.enabled: false), so no CronJob would retrain it: enable the pool or remove it from schedule.pools" . .) -}}
{{- end -}}
{{- end -}}
{{- $secretNames := dict -}}
{{- range .Values.secretEnv -}}
{{- if hasKey $secretNames .name -}}
{{- fail (printf "secretEnv names %q twice: a container holds each variable once (the API server refuses the pods, or one value silently replaces the other); give each name once" .name) -}}
{{- end -}}
{{- if hasKey ($.Values.env | default dict) .name -}}
{{- fail (printf "%q is in both env and secretEnv: the Secret's value would silently replace env's in every container; keep it in one" .name) -}}
{{- end -}}
{{- $_ := set $secretNames .name true -}}
{{- end -}}
{{- if .Values.tune.enabled -}}
{{- if and (eq .Values.tune.scheduler "grid") .Values.tune.space -}}
{{- $listed := false -}}
{{- $ranges := list -}}
{{- range $key, $dimension := .Values.tune.space -}}
{{- range $kind, $_ := $dimension -}}
{{- if has $kind (list "grid" "choice") -}}{{- $listed = true -}}{{- end -}}
{{- $ranges = append $ranges (printf "%s: %s" $key $kind) -}}
{{- end -}}
{{- end -}}
{{- if not $listed -}}
{{- fail (printf "tune.scheduler=grid lists every combination of the space's grid: and choice: keys, and tune.space has none (%s): list values with grid: or choice:, or set tune.scheduler=random to draw each trial from the ranges" (join ", " $ranges)) -}}
{{- end -}}
{{- end -}}
{{- $combos := 1 -}}
{{- range $key, $dimension := .Values.tune.space -}}
{{- range $kind, $list := $dimension -}}
{{- if or (eq $kind "grid") (and (eq $kind "choice") (eq $.Values.tune.scheduler "grid")) -}}
{{- $combos = min 10001 (mul $combos (len $list)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if gt (mul $combos (int .Values.tune.samples)) 10000 -}}
{{- fail (printf "tune.space: %s grid combinations x tune.samples=%d is over 10000 trials; list fewer values or draw fewer samples" (ternary "more than 10000" (toString $combos) (gt $combos 10000)) (int .Values.tune.samples)) -}}
{{- end -}}
{{- range $key, $dimension := .Values.tune.space -}}
{{- range $kind, $ends := $dimension -}}
{{- if and (has $kind (list "loguniform" "uniform" "randint")) (eq (len $ends) 2) -}}
{{- if gt (float64 (index $ends 0)) (float64 (index $ends 1)) -}}
{{- fail (printf "tune.space.%s: %s takes [low, high], low <= high" $key $kind) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- include "trainctl.memoryCheck" (dict "key" "head.memory" "q" .Values.head.memory) -}}
{{- if $data.enabled -}}
{{- include "trainctl.memoryCheck" (dict "key" "dataPool.memoryPerWorker" "q" $data.memoryPerWorker) -}}
{{- if lt (float64 (include "trainctl.amount" $data.cpusPerWorker)) 1.0 -}}
{{- fail (printf "dataPool.cpusPerWorker is %s, below 1 CPU: KubeRay starts a data node's Ray with its CPU limit rounded up, so Ray would run a whole decoding task on a fraction of a CPU and the pool would slow the run it was added to speed up; give it as 1, 2, 16..." (include "trainctl.str" $data.cpusPerWorker)) -}}
{{- end -}}
{{- end -}}
{{- range $pool, $p := include "trainctl.enabledPools" . | fromJson -}}
{{- $train := deepCopy ($.Values.train | default dict) -}}
{{- range $k, $val := ($p.train | default dict) }}{{ $_ := set $train $k $val }}{{ end -}}
{{- include "trainctl.capacityChecks" (dict "root" $ "pool" $pool "p" $p "train" $train) -}}
{{- end -}}
{{- end -}}

{{/* Whether a pool's pods hold what its run asks of them (app/k8s/capacity.py holds the same
rules, messages and arithmetic). KubeRay gives each pod's Ray node its CPU limit rounded up;
each pod holds one training worker per GPU (one on a CPU pool), each reserving
train.cpus_per_worker; Ray Data's tasks need a CPU left somewhere (a data pool, the head, or the
pool's own pods); a sweep's trial must fit in the pool. Otherwise the run waits forever. */}}
{{- define "trainctl.capacityChecks" -}}
{{- $v := .root.Values -}}
{{- $gpus := int .p.gpusPerWorker -}}
{{- $perPod := max 1 $gpus -}}
{{- $cpw := 1.0 -}}{{- with .train.cpus_per_worker }}{{ $cpw = float64 . }}{{ end -}}
{{- $cpus := include "trainctl.str" .p.cpusPerWorker -}}
{{- $node := ceil (include "trainctl.amount" $cpus) -}}
{{- $need := mulf $perPod $cpw -}}
{{- $fit := printf "%d training worker(s) per pod at train.cpus_per_worker %s" $perPod (include "trainctl.str" $cpw) -}}
{{- if gt $need $node -}}
{{- fail (printf "nodePools.%s: %s do not fit in cpusPerWorker %s (a Ray node of %s CPUs: KubeRay rounds the limit up), so the workers would wait forever; lower train.cpus_per_worker or raise cpusPerWorker" .pool $fit $cpus (include "trainctl.str" $node)) -}}
{{- end -}}
{{- $head := $v.head.rayStartParams | default dict -}}
{{- $headCpus := ceil (include "trainctl.amount" $v.head.cpu) -}}
{{- if hasKey $head "num-cpus" }}{{ $headCpus = float64 (include "trainctl.amount" (get $head "num-cpus")) }}{{ end -}}
{{- if and (not $v.dataPool.enabled) (lt (subf $node $need) 1.0) (lt $headCpus 1.0) -}}
{{- fail (printf "nodePools.%s: %s take every CPU of its pods (cpusPerWorker %s), and the head has none for Ray, so Ray Data's tasks would wait forever; leave one: lower train.cpus_per_worker, raise cpusPerWorker, give the head Ray CPUs (head.rayStartParams num-cpus) or enable dataPool" .pool $fit $cpus) -}}
{{- end -}}
{{- $trial := int $v.tune.workersPerTrial -}}
{{- if and $v.tune.enabled (gt $trial 0) -}}
{{- if and (gt $gpus 0) (gt $trial (mul (int .p.replicas) $gpus)) -}}
{{- fail (printf "tune.workersPerTrial (%d) is more training workers than pool %s has (%d pod(s) x %d GPU(s)), so no trial could start; lower tune.workersPerTrial or raise nodePools.%s.replicas" $trial .pool (int .p.replicas) $gpus .pool) -}}
{{- end -}}
{{- if and (eq $gpus 0) (gt (mulf $trial $cpw) (mulf (int .p.replicas) $node)) -}}
{{- fail (printf "tune.workersPerTrial (%d) at train.cpus_per_worker %s needs more CPUs than pool %s has (%d pod(s) of %s), so no trial could start; lower tune.workersPerTrial or raise nodePools.%s.replicas" $trial (include "trainctl.str" $cpw) .pool (int .p.replicas) (include "trainctl.str" $node) .pool) -}}
{{- end -}}
{{- end -}}
{{- include "trainctl.memoryCheck" (dict "key" (printf "nodePools.%s.memoryPerWorker" .pool) "q" .p.memoryPerWorker) -}}
{{- end -}}

{{/* A Ray pod's memory: at least 512Mi, the least a Ray node running torch starts in (a value
below it is nearly always a missing unit: 512 is bytes). Context: key, q. */}}
{{- define "trainctl.memoryCheck" -}}
{{- if lt (float64 (include "trainctl.amount" .q)) 536870912.0 -}}
{{- fail (printf "%s is %s, below 512Mi: a Ray pod running torch needs at least that (a number without a unit is bytes); give it as 16Gi, 512Mi..." .key (include "trainctl.str" .q)) -}}
{{- end -}}
{{- end -}}

{{/* A Kubernetes quantity as a plain number (cores, bytes), by sprig's arithmetic: the number
(Go's ParseFloat; 0 where out of range) times its suffix's factor. */}}
{{- define "trainctl.amount" -}}
{{- $text := include "trainctl.str" . -}}
{{- $number := regexFind "^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]+)?" $text -}}
{{- $factors := dict "" 1.0 "m" 0.001 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 "E" 1000000000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- mulf (float64 $number) (get $factors (trimPrefix $number $text) | default 0.0) -}}
{{- end -}}
