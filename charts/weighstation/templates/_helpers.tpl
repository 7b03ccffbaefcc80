{{/* Names. The operator's fixed names (its CA Secret weighstation-ca, the
bundle ConfigMap weighstation-ca-bundle, its Lease) are not here: its RBAC
names them, so the chart does not rename them. */}}

{{- define "weighstation.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "weighstation.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "weighstation.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "weighstation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels never change across upgrades (selectors are immutable). */}}
{{- define "weighstation.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "weighstation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "weighstation.operator.labels" -}}
{{ include "weighstation.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "weighstation.broker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "weighstation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: broker
{{- end }}

{{- define "weighstation.broker.labels" -}}
{{ include "weighstation.labels" . }}
app.kubernetes.io/component: broker
{{- end }}

{{- define "weighstation.operator.serviceAccountName" -}}
{{- default (printf "%s-operator" (include "weighstation.fullname" .)) .Values.operator.serviceAccount.name }}
{{- end }}

{{- define "weighstation.broker.serviceAccountName" -}}
{{- default (printf "%s-broker" (include "weighstation.fullname" .)) .Values.broker.serviceAccount.name }}
{{- end }}

{{/* The xDS Service; the operator puts its DNS names in its certificate. */}}
{{- define "weighstation.xdsServiceName" -}}
{{- printf "%s-xds" (include "weighstation.fullname" .) }}
{{- end }}

{{/* The webhook's Service; the operator puts its DNS names in the webhook's certificate. */}}
{{- define "weighstation.webhookServiceName" -}}
{{- printf "%s-sidecar-injector" (include "weighstation.fullname" .) }}
{{- end }}

{{/*
With webhook.certManager.enabled: the cert-manager Certificate of the
webhook's serving certificate, the Secret it is issued into (the operator
mounts it), and where the operator reads it (-webhook-cert-dir).
*/}}
{{- define "weighstation.webhookCertificateName" -}}
{{- include "weighstation.webhookServiceName" . }}
{{- end }}

{{- define "weighstation.webhookTLSSecretName" -}}
{{- printf "%s-tls" (include "weighstation.webhookServiceName" .) }}
{{- end }}

{{- define "weighstation.webhookCertDir" -}}
/etc/weighstation/webhook-tls
{{- end }}

{{/*
With webhook.certManager.enabled and no issuerRef.name: the chart's own
CA, bootstrapped by a self-signed Issuer, and the CA Issuer that signs the
webhook's certificate.
*/}}
{{- define "weighstation.webhookSelfSignedIssuerName" -}}
{{- printf "%s-webhook-selfsigned" (include "weighstation.fullname" .) }}
{{- end }}

{{- define "weighstation.webhookCAName" -}}
{{- printf "%s-webhook-ca" (include "weighstation.fullname" .) }}
{{- end }}

{{/*
The MutatingWebhookConfiguration. A fixed name: the operator's RBAC
(generated from its code) lets it write that one configuration's caBundle.
*/}}
{{- define "weighstation.webhookConfigurationName" -}}
weighstation-sidecar-injector
{{- end }}

{{- define "weighstation.broker.serviceName" -}}
{{- printf "%s-broker" (include "weighstation.fullname" .) }}
{{- end }}

{{- define "weighstation.broker.headlessServiceName" -}}
{{- printf "%s-broker-routes" (include "weighstation.fullname" .) }}
{{- end }}

{{/*
"true" when the brokers form a cluster with TLS on their routes: the
operator then keeps the route certificate Secret, and the brokers mount it.
*/}}
{{- define "weighstation.broker.routeTLS" -}}
{{- if and .Values.broker.enabled (gt (int .Values.broker.replicas) 1) .Values.broker.cluster.tls.enabled }}true{{ end }}
{{- end }}

{{/*
The brokers' route certificate Secret, which the operator keeps from its CA.
A fixed name: the operator's RBAC (generated from its code) names it.
*/}}
{{- define "weighstation.broker.routeTLSSecretName" -}}
weighstation-broker-routes-tls
{{- end }}

{{- define "weighstation.broker.tokenSecretName" -}}
{{- default (printf "%s-broker-token" (include "weighstation.fullname" .)) .Values.broker.auth.existingSecret }}
{{- end }}

{{/* The URL the sidecars' -broker flag takes. */}}
{{- define "weighstation.brokerURL" -}}
{{- if .Values.broker.enabled }}
{{- printf "nats://%s.%s.svc:%d" (include "weighstation.broker.serviceName" .) .Release.Namespace (int .Values.broker.clientPort) }}
{{- else }}
{{- .Values.externalNATS.url }}
{{- end }}
{{- end }}

{{- define "weighstation.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Every pod: non-root, seccomp RuntimeDefault. */}}
{{- define "weighstation.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Every container: read-only root, no capabilities, no escalation. */}}
{{- define "weighstation.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Replicas on different nodes when they can be, so that a node's loss
takes at most one (what the PodDisruptionBudgets assume). Used when the
component's affinity value is empty. Call with (dict "ctx" . "component"
"operator"). */}}
{{- define "weighstation.defaultAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include (printf "weighstation.%s.selectorLabels" .component) .ctx | nindent 12 }}
{{- end }}
