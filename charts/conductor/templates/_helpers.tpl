{{/* Names and labels. */}}
{{- define "conductor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "conductor.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "conductor.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "conductor.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "conductor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "conductor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "planner"). */}}
{{- define "conductor.selector" -}}
app.kubernetes.io/name: {{ include "conductor.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "conductor.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* NATS: the official chart's name label and Service (its nats.name and nats.fullname, from the same values), the
client URL (no credentials), the credentials Secret, the env var naming a user's password. */}}
{{- define "conductor.natsName" -}}
{{- default "nats" .Values.nats.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "conductor.natsHost" -}}
{{- $name := include "conductor.natsName" . -}}
{{- if .Values.nats.fullnameOverride -}}
{{- .Values.nats.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The official chart's values that carry the users in (values.yaml: nats.config.merge, nats.container.patch,
nats.statefulSet.patch). Helm replaces a list given in a values file, so an operator's own patch list could drop
them and leave a server that cannot start: refuse to render instead, saying what to keep. The server's TLS and the
clients' (global.tls) must agree too. */}}
{{- define "conductor.natsWiring" -}}
{{- $n := .Values.nats -}}
{{- if ne (get (default dict $n.config.merge) "$include") "../nats-auth/authorization.conf" -}}
{{- fail "nats.config.merge must keep `$include: ../nats-auth/authorization.conf` (the per-service users)" -}}
{{- end -}}
{{- $container := toJson $n.container.patch -}}
{{- if not (and (contains "\"/envFrom\"" $container) (contains "conductor-nats-auth" $container)) -}}
{{- fail "nats.container.patch must keep the chart's two entries (envFrom: the users' passwords; the conductor-nats-auth mount): copy them from values.yaml, then add yours" -}}
{{- end -}}
{{- if not (contains "conductor-nats-auth" (toJson $n.statefulSet.patch)) -}}
{{- fail "nats.statefulSet.patch must keep the chart's conductor-nats-auth volume: copy it from values.yaml, then add yours" -}}
{{- end -}}
{{- if ne (toString .Values.global.tls.enabled) (toString $n.config.nats.tls.enabled) -}}
{{- fail "global.tls.enabled (the clients) and nats.config.nats.tls.enabled (the server) must agree" -}}
{{- end -}}
{{- if $n.config.nats.tls.enabled -}}
{{- $_ := required "nats.config.nats.tls.secretName is required when nats.config.nats.tls.enabled" $n.config.nats.tls.secretName -}}
{{- end -}}
{{- end -}}

{{- define "conductor.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{- printf "%s://%s.%s.svc:4222" (ternary "tls" "nats" .Values.global.tls.enabled) (include "conductor.natsHost" .) .Release.Namespace -}}
{{- else -}}
{{- required "nats.url is required when nats.enabled is false" .Values.nats.url -}}
{{- end -}}
{{- end -}}

{{- define "conductor.natsCredentialsSecret" -}}
{{- default (printf "%s-nats-credentials" .Release.Name) .Values.nats.existingCredentialsSecret -}}
{{- end -}}

{{- define "conductor.passwordKey" -}}
{{- printf "NATS_PASSWORD_%s" (. | upper | replace "-" "_") -}}
{{- end -}}

{{/* Every NATS user of the release: each enabled service block (a map with `args` and `nats`), then auth.users, then
each of auth.tenants with auth.tenant's permissions and doors on its own name ({tenant} replaced; docs/tenancy.md).
A user with doors has an account of its own importing them; the others are the services' account, "conductor". */}}
{{- define "conductor.natsUsers" -}}
{{- $users := list -}}
{{- $names := list -}}
{{- range $key, $svc := .Values -}}
{{- if and (kindIs "map" $svc) (hasKey $svc "args") (hasKey $svc "nats") $svc.enabled -}}
{{- $users = append $users (dict "user" $svc.nats.user "publish" $svc.nats.publish "subscribe" $svc.nats.subscribe "responses" $svc.nats.responses "doors" $svc.nats.doors "jetstream" $svc.nats.jetstream) -}}
{{- $names = append $names $svc.nats.user -}}
{{- end -}}
{{- end -}}
{{- range $name, $u := .Values.auth.users -}}
{{- $users = append $users (dict "user" $name "publish" $u.publish "subscribe" $u.subscribe "doors" $u.doors) -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- $t := .Values.auth.tenant -}}
{{- range $name := .Values.auth.tenants -}}
{{- if not (regexMatch "^[A-Za-z0-9_-]{1,64}$" $name) -}}
{{- fail (printf "auth.tenants: %q is not a tenant name (1-64 letters, digits, '_' or '-')" $name) -}}
{{- end -}}
{{- if or (has $name $names) (eq $name "conductor") -}}
{{- fail (printf "auth.tenants: %q is already a user or the services' account of this release" $name) -}}
{{- end -}}
{{- $publish := list -}}
{{- range $t.publish }}{{ $publish = append $publish (replace "{tenant}" $name .) }}{{ end -}}
{{- $subscribe := list -}}
{{- range $t.subscribe }}{{ $subscribe = append $subscribe (replace "{tenant}" $name .) }}{{ end -}}
{{- $doors := list -}}
{{- range $t.doors }}{{ $doors = append $doors (fromJson (replace "{tenant}" $name (toJson .))) }}{{ end -}}
{{- $users = append $users (dict "user" $name "publish" $publish "subscribe" $subscribe "doors" $doors) -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- toJson $users -}}
{{- end -}}

{{/* Env vars that connect a container to NATS as `user`: (dict "root" $ "user" "planner"). */}}
{{- define "conductor.natsEnv" -}}
- name: NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "conductor.natsCredentialsSecret" .root }}
      key: {{ include "conductor.passwordKey" .user }}
- name: NATS_URL
  {{- $url := include "conductor.natsUrl" .root }}
  {{- $scheme := ternary "tls" "nats" (hasPrefix "tls://" $url) }}
  value: {{ printf "%s://%s:$(NATS_PASSWORD)@%s" $scheme .user (trimPrefix (printf "%s://" $scheme) $url) | quote }}
{{- if .root.Values.global.tls.enabled }}
- name: SSL_CERT_FILE
  value: /etc/conductor/tls/ca.crt
{{- end }}
{{- end -}}

{{/* OTLP export settings of a container: (dict "root" $ "name" "executor"); nothing when tracing is off. */}}
{{- define "conductor.otelEnv" -}}
{{- with .root.Values.tracing.otlpEndpoint -}}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ printf "conductor-%s" $.name | quote }}
{{- end -}}
{{- end -}}

{{/* Pod security context of a Conductor pod. The verifier's sandbox exceptions are added by the component. */}}
{{- define "conductor.podSecurityContext" -}}
{{ toYaml .Values.podSecurityContext }}
{{- end -}}

{{/* One user of the accounts block (nats-auth.yaml): its password from the environment, its permissions. */}}
{{- define "conductor.natsUser" -}}
{
  user: {{ .user | quote }}
  password: ${{ include "conductor.passwordKey" .user }}
  permissions: {
    publish: { allow: [{{ include "conductor.natsList" .publish }}] }
    subscribe: { allow: [{{ include "conductor.natsList" (append .subscribe (printf "_INBOX.%s.>" .user)) }}] }
    {{- with .responses }}
    allow_responses: { max: {{ .max | int }}, expires: {{ .expires | quote }} }
    {{- end }}
  }
}
{{- end -}}

{{/* A subject list in nats-server config syntax: "a", "b". */}}
{{- define "conductor.natsList" -}}
{{- range $i, $s := . }}{{ if $i }}, {{ end }}{{ $s | quote }}{{ end -}}
{{- end -}}

{{/* How the learner brings the policy vLLM server (vllm.servers.policy) to a finished job's policy; "true" or "".
runtimeLora: the learner and that server both deployed, the server with runtimeLora.enabled: the learner POSTs
the adapter to the server (services/learner/versions.py load_runtime_lora) and never rolls it.
learnerRolls: learner.rollPolicyServer otherwise: it patches the Deployment (a service-account token, a Role,
egress to the API server). */}}
{{- define "conductor.runtimeLora" -}}
{{- $policy := dig "policy" dict .Values.vllm.servers -}}
{{- if and .Values.learner.enabled (dig "enabled" false $policy) (dig "runtimeLora" "enabled" false $policy) -}}
true
{{- end -}}
{{- end -}}

{{- define "conductor.learnerRolls" -}}
{{- if and .Values.learner.enabled .Values.learner.rollPolicyServer (not (include "conductor.runtimeLora" .)) -}}
true
{{- end -}}
{{- end -}}
