{{/*
The chart's name, overridable by nameOverride.
*/}}
{{- define "sandbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: <release>-<chart>, or the release name when it already contains the chart's name.
Truncated to 50 so that suffixed names ("-redis-headless") stay within 63 characters.
*/}}
{{- define "sandbox.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sandbox.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object of the chart.
*/}}
{{- define "sandbox.labels" -}}
helm.sh/chart: {{ include "sandbox.chart" . }}
{{ include "sandbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sandbox-platform
{{- end }}

{{/*
Labels of pod templates and volume claim templates: no app version, so that a new version does not change a
StatefulSet's (immutable) volumeClaimTemplates. helm.sh/chart, which names the chart's version, stays off claims.
*/}}
{{- define "sandbox.templateLabels" -}}
helm.sh/chart: {{ include "sandbox.chart" . }}
{{ include "sandbox.claimLabels" . }}
{{- end }}

{{- define "sandbox.claimLabels" -}}
{{ include "sandbox.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sandbox-platform
{{- end }}

{{- define "sandbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sandbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of the control plane's pods (also what the sandboxes' NetworkPolicy admits). */}}
{{- define "sandbox.controlPlane.selectorLabels" -}}
{{ include "sandbox.selectorLabels" . }}
app.kubernetes.io/component: control-plane
{{- end }}

{{- define "sandbox.redis.selectorLabels" -}}
{{ include "sandbox.selectorLabels" . }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "sandbox.redis.fullname" -}}
{{- printf "%s-redis" (include "sandbox.fullname" .) }}
{{- end }}

{{- define "sandbox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sandbox.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The sandbox namespace; never the release namespace. */}}
{{- define "sandbox.sandboxNamespace" -}}
{{- $ns := required "sandboxes.namespace.name is required" .Values.sandboxes.namespace.name }}
{{- if eq $ns .Release.Namespace }}
{{- fail (printf "sandboxes.namespace.name (%s) must differ from the release namespace: sandboxes run apart from the control plane and its Redis" $ns) }}
{{- end }}
{{- $ns }}
{{- end }}

{{- define "sandbox.owner" -}}
{{- default .Release.Name .Values.controlPlane.owner }}
{{- end }}

{{/*
An image reference from {registry, repository, tag, digest}: (dict "image" .Values.x.image "root" $ "defaultTag" "...").
The registry falls back to global.imageRegistry, the tag to the chart's appVersion; a digest wins over the tag.
*/}}
{{- define "sandbox.image" -}}
{{- $registry := default .root.Values.global.imageRegistry .image.registry }}
{{- $repo := .image.repository }}
{{- if $registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" $registry) $repo }}{{ end }}
{{- if .image.digest }}
{{- printf "%s@%s" $repo .image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion (default .defaultTag .image.tag) | toString) }}
{{- end }}
{{- end }}

{{/* The image of one sandbox kind: (dict "kind" "terminal" "root" $). */}}
{{- define "sandbox.sandboxImage" -}}
{{- $images := .root.Values.sandboxes.images }}
{{- $kind := index $images .kind }}
{{- include "sandbox.image" (dict "image" (dict "registry" $images.registry "repository" $kind.repository "tag" (default $images.tag $kind.tag) "digest" $kind.digest) "root" .root) }}
{{- end }}

{{/* The claim holding snapshot archives: controlPlane.snapshots.existingClaim, or the chart's own. */}}
{{- define "sandbox.snapshotsClaimName" -}}
{{- default (printf "%s-snapshots" (include "sandbox.fullname" .)) .Values.controlPlane.snapshots.existingClaim }}
{{- end }}

{{/*
"true" when the control plane's pods may be rolled one by one (a surge pod beside the old ones): the snapshot volume
is ReadWriteMany, or an emptyDir. A ReadWriteOnce volume cannot attach on a second node, so its pods are replaced
(strategy Recreate); a ReadWriteOncePod volume admits one pod at all.
*/}}
{{- define "sandbox.snapshotsRolling" -}}
{{- $s := .Values.controlPlane.snapshots }}
{{- $replicas := int .Values.controlPlane.replicaCount }}
{{- if and $s.enabled (has "ReadWriteOncePod" $s.accessModes) (not (has "ReadWriteMany" $s.accessModes)) (gt $replicas 1) }}
{{- fail "controlPlane.snapshots.accessModes is ReadWriteOncePod: one pod may mount it, so controlPlane.replicaCount must be 1 (ReadWriteMany for more)" }}
{{- end }}
{{- if and $s.enabled (not (has "ReadWriteMany" $s.accessModes)) (gt $replicas 1) }}
{{- fail (printf "controlPlane.replicaCount is %d but the snapshot claim is not ReadWriteMany (controlPlane.snapshots.accessModes: %s): the replicas on other nodes could not mount it and would stay Pending. Set controlPlane.snapshots.accessModes={ReadWriteMany} with an RWX class in controlPlane.snapshots.storageClassName (EKS efs-sc, GKE a Filestore class, AKS azurefile-csi: examples/values-eks.yaml, -gke, -aks), or controlPlane.replicaCount=1" $replicas (join "," $s.accessModes)) }}
{{- end }}
{{- if or (not $s.enabled) (has "ReadWriteMany" $s.accessModes) }}true{{ end }}
{{- end }}

{{/* The name of the Secret holding the tokens file, and its key. */}}
{{- define "sandbox.tokensSecretName" -}}
{{- default (printf "%s-tokens" (include "sandbox.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "sandbox.tokensSecretKey" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.existingSecretKey }}{{ else }}tokens.json{{ end }}
{{- end }}

{{/*
The tokens file the chart's Secret holds: auth.tokens, or one random admin token kept across upgrades (read back
from the Secret of the previous release; `helm template` has no cluster and draws a new one each time).
*/}}
{{- define "sandbox.tokensFile" -}}
{{- if .Values.auth.tokens }}
{{- .Values.auth.tokens | toJson }}
{{- else if not .Values.auth.generateAdminToken }}
{{- fail "no tokens: set auth.existingSecret, auth.tokens, or auth.generateAdminToken=true (the server listens beyond loopback only with tokens)" }}
{{- else }}
{{- $previous := lookup "v1" "Secret" .Release.Namespace (include "sandbox.tokensSecretName" .) }}
{{- if and $previous $previous.data (index $previous.data "tokens.json") }}
{{- index $previous.data "tokens.json" | b64dec }}
{{- else }}
{{- dict (randAlphaNum 40) (dict "tenant" "admin" "admin" true) | toJson }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The environment variables giving the control plane its Redis URL (SANDBOX_REDIS_URL, read by `sandbox server`).
*/}}
{{- define "sandbox.redisEnv" -}}
{{- if .Values.redis.enabled }}
{{- /* the short name: Redis runs in the control plane's namespace (so kustomize overlays can move both) */}}
{{- $host := include "sandbox.redis.fullname" . }}
{{- if .Values.redis.auth.existingSecret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.auth.existingSecret }}
      key: {{ .Values.redis.auth.existingSecretPasswordKey }}
# $(REDIS_PASSWORD) is expanded by the kubelet; the password must be URL-safe.
- name: SANDBOX_REDIS_URL
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s:6379/%d" $host (int .Values.redis.database) | quote }}
{{- else }}
- name: SANDBOX_REDIS_URL
  value: {{ printf "redis://%s:6379/%d" $host (int .Values.redis.database) | quote }}
{{- end }}
{{- else if .Values.redis.external.existingSecret }}
- name: SANDBOX_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.external.existingSecret }}
      key: {{ .Values.redis.external.existingSecretKey }}
{{- else if .Values.redis.external.url }}
- name: SANDBOX_REDIS_URL
  value: {{ .Values.redis.external.url | quote }}
{{- else }}
{{- fail "redis.enabled is false: set redis.external.url or redis.external.existingSecret (replicas share state in Redis)" }}
{{- end }}
{{- end }}

{{/*
server.json: the settings `sandbox server --config` reads (pools, lifecycle, backend). Flags win over it.
*/}}
{{- define "sandbox.serverConfig" -}}
{{- $pools := list }}
{{- range .Values.pools }}
{{- $pool := dict "spec" .spec }}
{{- if hasKey . "min" }}{{ $_ := set $pool "min" .min }}{{ end }}
{{- if hasKey . "max" }}{{ $_ := set $pool "max" .max }}{{ end }}
{{- if hasKey . "maxStarting" }}{{ $_ := set $pool "max_starting" .maxStarting }}{{ end }}
{{- $pools = append $pools $pool }}
{{- end }}
{{- $images := dict }}
{{- range $kind := list "terminal" "desktop" "browser" }}
{{- $_ := set $images $kind (include "sandbox.sandboxImage" (dict "kind" $kind "root" $)) }}
{{- end }}
{{- $s := .Values.sandboxes }}
{{- $android := $s.android | default dict }}
{{- $backend := dict
  "type" "kubernetes"
  "namespace" (include "sandbox.sandboxNamespace" .)
  "images" $images
  "image_pull_policy" $s.images.pullPolicy
  "image_pull_secrets" $s.imagePullSecrets
  "runtime_class" ($s.runtimeClassName | default nil)
  "node_selector" $s.nodeSelector
  "tolerations" $s.tolerations
  "priority_class" ($s.priorityClassName | default nil)
  "storage_class" ($s.storageClassName | default nil)
  "volume_access_mode" $s.volumeAccessMode
  "volume_size" $s.volumeSize
  "snapshot_dir" .Values.controlPlane.snapshots.path
  "android_kvm_resource" ($android.kvmResource | default nil)
  "android_kvm_group" ($android.kvmGroup | default nil)
}}
{{- if not (kindIs "invalid" $s.scheduleTimeoutSeconds) }}
{{- $_ := set $backend "schedule_timeout_s" $s.scheduleTimeoutSeconds }}
{{- end }}
{{- dict "backend" $backend "pools" $pools "lifecycle" .Values.lifecycle | toPrettyJson }}
{{- end }}
