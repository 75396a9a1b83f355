{{/* The labels every object carries (the base's kustomize labels). */}}
{{- define "fedpq.labels" -}}
app.kubernetes.io/part-of: fedpq
{{- end }}

{{/* The image: repository:tag, or repository@digest where a digest is set. */}}
{{- define "fedpq.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}
{{- end }}

{{/* The fleet pods: ceil(clients.count / clients.blockSize). */}}
{{- define "fedpq.blocks" -}}
{{- $n := int .Values.clients.count -}}
{{- $s := int .Values.clients.blockSize -}}
{{- if or (lt $n 1) (lt $s 1) -}}
{{- fail "clients.count and clients.blockSize must be 1 or more" -}}
{{- end -}}
{{- div (add $n $s -1) $s -}}
{{- end }}

{{/*
A container's resources from a sizing rule: the memory request baseMiB +
perClientKiB x clients, rounded up to a MiB; the limit limitPercent of it,
rounded up. Called with (dict "v" .Values.server "clients" N).
*/}}
{{- define "fedpq.resources" -}}
{{- if .v.resources -}}
{{ toYaml .v.resources }}
{{- else -}}
{{- $req := add (int .v.memory.baseMiB) (div (add (mul (int .v.memory.perClientKiB) (int .clients)) 1023) 1024) -}}
{{- $lim := div (add (mul $req (int .v.memory.limitPercent)) 99) 100 -}}
requests:
  cpu: {{ .v.cpu.request | quote }}
  memory: {{ $req }}Mi
limits:
  cpu: {{ .v.cpu.limit | quote }}
  memory: {{ $lim }}Mi
{{- end }}
{{- end }}

{{/* The environment that gives Go its soft memory limit: the memory request, in MiB. */}}
{{- define "fedpq.gomemlimit" -}}
# Go's soft memory limit is the pod's memory request, in MiB: the
# garbage collector works to stay under it, and the limit above it
# is the headroom before the kernel kills the pod.
- name: FEDPQ_MEMORY_REQUEST_MIB
  valueFrom:
    resourceFieldRef:
      containerName: {{ . }}
      resource: requests.memory
      divisor: 1Mi
- name: GOMEMLIMIT
  value: $(FEDPQ_MEMORY_REQUEST_MIB)MiB
{{- end }}

{{/* The restricted Pod Security level's settings, pod and container. */}}
{{- define "fedpq.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- define "fedpq.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/* The run's clients (run: as YAML), which must be clients.count. */}}
{{- define "fedpq.checkRun" -}}
{{- $run := fromYaml .Values.run -}}
{{- if hasKey $run "Error" -}}
{{- fail (printf "run: not YAML: %s" (get $run "Error")) -}}
{{- end -}}
{{- if ne (int (get $run "clients")) (int .Values.clients.count) -}}
{{- fail (printf "run: has clients: %v, clients.count is %v: they must agree" (get $run "clients") .Values.clients.count) -}}
{{- end -}}
{{- end }}

{{/*
The run's ConfigMap's name as kustomize's configMapGenerator makes it: the
sha256 of the JSON {"data":...,"kind":"ConfigMap","name":""} (keys sorted, as
Go's encoding/json writes them), its first 10 hex digits with 0, 1, 3, a and
e written g, h, k, m and t. The name is empty: kustomize looks it up as one
field named "metadata/name" (hasher.go, encodeConfigMap), which a ConfigMap
does not have, so its hash covers the data alone.
*/}}
{{- define "fedpq.runConfigMap" -}}
{{- $json := dict "data" (dict "run.yaml" .Values.run) "kind" "ConfigMap" "name" "" | toJson -}}
{{- $hex := sha256sum $json | trunc 10 -}}
fedpq-run-{{ $hex | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" }}
{{- end }}
