{{/*
One Conductor service: Deployment, metrics Service, autoscaler, PodDisruptionBudget.
Use: {{ include "conductor.component" (dict "root" . "key" "workerAdapter" "name" "worker-adapter") }}
`key` is the service's values block; its shape is the one every service block in values.yaml shares. Its
`container` and `podTemplate` hooks (merge, patch) apply to the container and then to the pod template.
*/}}
{{- define "conductor.component" -}}
{{- $root := .root -}}
{{- $svc := index $root.Values .key -}}
{{- if $svc.enabled -}}
{{- $name := printf "%s-%s" (include "conductor.fullname" $root) .name -}}
{{- $sel := dict "root" $root "component" .name -}}
{{- $scaled := and $svc.autoscaling $svc.autoscaling.enabled -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  labels:
    {{- include "conductor.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  {{- if not $scaled }}
  replicas: {{ $svc.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "conductor.selector" $sel | nindent 6 }}
  template:
    {{- include "conductor.hooked" (dict "doc" (include "conductor.podTemplate" .) "hooks" $svc.podTemplate) | nindent 4 }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  labels:
    {{- include "conductor.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
    conductor.io/metrics: "true"
spec:
  selector:
    {{- include "conductor.selector" $sel | nindent 4 }}
  ports:
    - name: metrics
      port: {{ $root.Values.metricsPort }}
      targetPort: metrics
      protocol: TCP
    {{- if $svc.http }}
    - name: http
      port: {{ $svc.http.port }}
      targetPort: http
      protocol: TCP
    {{- end }}
{{- if $svc.http }}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ $name }}-http
  labels:
    {{- include "conductor.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  podSelector:
    matchLabels:
      {{- include "conductor.selector" $sel | nindent 6 }}
  policyTypes: [Ingress]
  {{- with $svc.http.ingressFrom }}
  ingress:
    - from:
        {{- toYaml . | nindent 8 }}
      ports:
        - {port: {{ $svc.http.port }}, protocol: TCP}
  {{- end }}
{{- end }}
{{- if and $scaled $svc.autoscaling.keda $svc.autoscaling.keda.enabled }}
---
{{ include "conductor.scaledObject" (dict "root" $root "name" $name "svc" $svc) }}
{{- else if $scaled }}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ $name }}
  labels:
    {{- include "conductor.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ $name }}
  minReplicas: {{ $svc.autoscaling.minReplicas }}
  maxReplicas: {{ $svc.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ $svc.autoscaling.targetCPUUtilizationPercentage }}
{{- end }}
{{- if $svc.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  labels:
    {{- include "conductor.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  maxUnavailable: {{ $svc.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "conductor.selector" $sel | nindent 6 }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
A rendered object with an operator's hooks applied, as the official NATS chart does on its resources: `merge` is
deep-merged over it (maps merge key by key; lists and scalars are replaced; false, 0 and "" do not override, use a
patch), then `patch`, RFC 6902 operations (conductor.jsonpatch), e.g. {op: add, path: /env/-, value: {...}}.
Use: (dict "doc" <the object as YAML text> "hooks" <a {merge, patch} block>).
*/}}
{{- define "conductor.hooked" -}}
{{- $doc := fromYaml .doc -}}
{{- if hasKey $doc "Error" -}}
{{- fail (printf "conductor.hooked: %s" $doc.Error) -}}
{{- end -}}
{{- $hooks := default dict .hooks -}}
{{- $doc = mergeOverwrite $doc (deepCopy (default dict $hooks.merge)) -}}
{{- $patched := include "conductor.jsonpatch" (dict "doc" $doc "patch" (default list $hooks.patch)) | fromJson -}}
{{- toYaml $patched.doc -}}
{{- end -}}

{{/* The pod template of a component: (dict "root" $ "key" "planner" "name" "planner"), as conductor.component. */}}
{{- define "conductor.podTemplate" -}}
{{- $root := .root -}}
{{- $svc := index $root.Values .key -}}
{{- $sel := dict "root" $root "component" .name -}}
{{- $sandbox := and (eq .name "verifier") $svc.sandbox.enabled -}}
metadata:
  labels:
    {{- include "conductor.selector" $sel | nindent 4 }}
    conductor.io/nats-client: "true"
  annotations:
    checksum/pool: {{ include "conductor.poolData" $root | sha256sum }}
spec:
  serviceAccountName: {{ include "conductor.fullname" $root }}
  automountServiceAccountToken: false
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $sandbox }}
  hostUsers: false
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ $svc.terminationGracePeriodSeconds }}
  containers:
    - {{- include "conductor.hooked" (dict "doc" (include "conductor.container" .) "hooks" $svc.container) | nindent 6 }}
  volumes:
    - name: tmp
      emptyDir: {sizeLimit: {{ $root.Values.tmpSizeLimit }}}
    {{- range $svc.secretFiles }}
    - name: {{ printf "file-%s" .secret | trunc 63 }}
      secret:
        secretName: {{ .secret }}
        items:
          - {key: {{ .key }}, path: {{ .key }}}
    {{- end }}
    {{- include "conductor.poolVolume" $root | nindent 4 }}
    {{- include "conductor.caVolume" $root | nindent 4 }}
  {{- with $svc.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $svc.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $svc.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels:
          {{- include "conductor.selector" $sel | nindent 10 }}
{{- end -}}

{{/* Its container: the same argument. */}}
{{- define "conductor.container" -}}
{{- $root := .root -}}
{{- $svc := index $root.Values .key -}}
{{- $sandbox := and (eq .name "verifier") $svc.sandbox.enabled -}}
name: {{ .name }}
{{- $image := $root.Values.image }}
{{- if and $svc.image $svc.image.repository }}
{{- $image = $svc.image }}
{{- end }}
image: {{ include "conductor.image" (dict "root" $root "image" $image) }}
imagePullPolicy: {{ $image.pullPolicy }}
args:
  {{- toYaml $svc.args | nindent 2 }}
env:
  {{- include "conductor.natsEnv" (dict "root" $root "user" $svc.nats.user) | nindent 2 }}
  - name: CONDUCTOR_METRICS_PORT
    value: {{ $root.Values.metricsPort | quote }}
  - name: CONDUCTOR_LOG_LEVEL
    value: {{ $root.Values.logLevel | quote }}
  - name: CONDUCTOR_LOG_JSON
    value: "1"
  {{- include "conductor.otelEnv" (dict "root" $root "name" .name) | nindent 2 }}
  - name: CONDUCTOR_DRAIN_TIMEOUT_S
    value: {{ max 1 (sub $svc.terminationGracePeriodSeconds 5) | quote }}
  {{- if include "conductor.poolData" $root }}
  - name: CONDUCTOR_POOL
    value: /etc/conductor/pool/pool.toml
  {{- end }}
  {{- if eq .name "verifier" }}
  {{- if $svc.sandbox.enabled }}
  - name: CONDUCTOR_SANDBOX_REQUIRE
    value: {{ join "," $svc.sandbox.require | quote }}
  {{- else }}
  - name: CONDUCTOR_SANDBOX_BACKEND
    value: none
  - name: CONDUCTOR_SANDBOX_REQUIRE
    value: "1"
  {{- end }}
  {{- end }}
  {{- range $k, $v := $svc.env }}
  - name: {{ $k }}
    value: {{ tpl (toString $v) $root | quote }}
  {{- end }}
  {{- range $svc.secretFiles }}
  - name: {{ .env }}
    value: {{ printf "/etc/conductor/files/%s/%s" .secret .key | quote }}
  {{- end }}
{{- if $svc.egressToProviders }}
{{- if or $root.Values.apiKeys.existingSecret $root.Values.apiKeys.values }}
envFrom:
  - secretRef:
      name: {{ default (printf "%s-api-keys" (include "conductor.fullname" $root)) $root.Values.apiKeys.existingSecret }}
{{- end }}
{{- end }}
ports:
  - name: metrics
    containerPort: {{ $root.Values.metricsPort }}
    protocol: TCP
  {{- if $svc.http }}
  - name: http
    containerPort: {{ $svc.http.port }}
    protocol: TCP
  {{- end }}
startupProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
resources:
  {{- toYaml $svc.resources | nindent 2 }}
securityContext:
  {{- $sc := deepCopy $root.Values.securityContext }}
  {{- if $sandbox }}
  {{- $_ := set $sc "seccompProfile" $svc.sandbox.seccompProfile }}
  {{- $_ := set $sc "appArmorProfile" $svc.sandbox.appArmorProfile }}
  {{- $_ := set $sc "procMount" $svc.sandbox.procMount }}
  {{- end }}
  {{- toYaml $sc | nindent 2 }}
volumeMounts:
  - {name: tmp, mountPath: /tmp}
  {{- if include "conductor.poolData" $root }}
  - {name: pool, mountPath: /etc/conductor/pool, readOnly: true}
  {{- end }}
  {{- if $root.Values.global.tls.enabled }}
  - {name: nats-ca, mountPath: /etc/conductor/tls, readOnly: true}
  {{- end }}
  {{- range $svc.secretFiles }}
  - {name: {{ printf "file-%s" .secret | trunc 63 }}, mountPath: {{ printf "/etc/conductor/files/%s" .secret }}, readOnly: true}
  {{- end }}
{{- end -}}

{{/* KEDA: scale the executor on the pending messages of its durable intake consumer (JetStream lag). */}}
{{- define "conductor.scaledObject" -}}
{{- $root := .root -}}
{{- $k := .svc.autoscaling.keda -}}
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {{ .name }}
  labels:
    {{- include "conductor.labels" $root | nindent 4 }}
    app.kubernetes.io/component: executor
spec:
  scaleTargetRef:
    name: {{ .name }}
  minReplicaCount: {{ .svc.autoscaling.minReplicas }}
  maxReplicaCount: {{ .svc.autoscaling.maxReplicas }}
  pollingInterval: {{ $k.pollingInterval }}
  cooldownPeriod: {{ $k.cooldownPeriod }}
  triggers:
    - type: nats-jetstream
      metadata:
        {{- if $root.Values.nats.enabled }}
        natsServerMonitoringEndpoint: {{ printf "%s.%s.svc:8222" (include "conductor.natsHost" $root) $root.Release.Namespace | quote }}
        {{- else }}
        natsServerMonitoringEndpoint: {{ required "nats.monitoringEndpoint is required for KEDA with an external NATS" $root.Values.nats.monitoringEndpoint | quote }}
        {{- end }}
        account: {{ $root.Values.nats.account | quote }}
        stream: CONDUCTOR_TASKS
        consumer: executor
        lagThreshold: {{ $k.lagThreshold | quote }}
        activationLagThreshold: {{ $k.activationLagThreshold | quote }}
    - type: cpu
      metricType: Utilization
      metadata:
        value: {{ .svc.autoscaling.targetCPUUtilizationPercentage | quote }}
{{- end -}}

{{/* The pool file: contents (empty: the bundled demo pool), its volume. */}}
{{- define "conductor.poolData" -}}
{{- if or .Values.pool.existingConfigMap .Values.pool.toml -}}
{{- printf "%s%s" .Values.pool.existingConfigMap .Values.pool.toml -}}
{{- end -}}
{{- end -}}

{{- define "conductor.poolVolume" -}}
{{- if include "conductor.poolData" . -}}
- name: pool
  configMap:
    name: {{ default (printf "%s-pool" (include "conductor.fullname" .)) .Values.pool.existingConfigMap }}
{{- end -}}
{{- end -}}

{{- define "conductor.caVolume" -}}
{{- if .Values.global.tls.enabled -}}
- name: nats-ca
  secret:
    secretName: {{ required "tls.secretName is required when tls.enabled" .Values.global.tls.secretName }}
    items:
      - {key: ca.crt, path: ca.crt}
{{- end -}}
{{- end -}}
