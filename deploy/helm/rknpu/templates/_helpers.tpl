{{/* Shared pieces of the rknpu chart's templates. */}}

{{/* rknpu.image (list $ .Values.<component>.image): <registry>/<repository>:<tag>[@<digest>] */}}
{{- define "rknpu.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $registry := $image.registry | default $root.Values.image.registry -}}
{{- $tag := $image.tag | default $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- $name := $image.repository -}}
{{- if $registry }}{{ $name = printf "%s/%s" (trimSuffix "/" $registry) $name }}{{ end -}}
{{- $name }}:{{ $tag }}{{ with $image.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* rknpu.labels (dict "root" $ "name" "rknpu-device-plugin"): an object's labels; name may be "" */}}
{{- define "rknpu.labels" -}}
{{ with .name }}app.kubernetes.io/name: {{ . }}
{{ end }}app.kubernetes.io/part-of: rknnlaunch
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{/* rknpu.affinity (dict "root" $ "component" "devicePlugin"|"dra"): the node split, ANDed with
the component's own required node terms (affinity.nodeAffinity.required...): every NPU label term
times every user term. The other affinity parts are the component's own. */}}
{{- define "rknpu.affinity" -}}
{{- $root := .root -}}
{{- $values := index $root.Values .component -}}
{{- $split := $root.Values.nodeSplit -}}
{{- $operator := ternary "In" "NotIn" (eq .component "dra") -}}
{{- $why := ternary "only nodes moved to DRA: the device plugin runs on the others" "DRA nodes (docs/dra.md migration) get the DRA driver instead" (eq .component "dra") -}}
{{- $user := deepCopy ($values.affinity | default dict) -}}
{{- $userNode := $user.nodeAffinity | default dict -}}
{{- $userTerms := list (dict) -}}
{{- with $userNode.requiredDuringSchedulingIgnoredDuringExecution }}{{ $userTerms = .nodeSelectorTerms }}{{ end -}}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:  # terms are ORed; expressions in a term are ANDed
{{- range $label := $split.npuLabels }}
{{- range $term := $userTerms }}
        - matchExpressions:
            - key: {{ $label }}
              operator: In
              values: ["true"]
            - key: {{ $split.draLabel }}  # {{ $why }}
              operator: {{ $operator }}
              values: ["true"]
{{- with $term.matchExpressions }}
{{ toYaml . | indent 12 }}
{{- end }}
{{- with $term.matchFields }}
          matchFields:
{{ toYaml . | indent 12 }}
{{- end }}
{{- end }}
{{- end }}
{{- with $userNode.preferredDuringSchedulingIgnoredDuringExecution }}
    preferredDuringSchedulingIgnoredDuringExecution:
{{ toYaml . | indent 6 }}
{{- end }}
{{- $rest := omit $user "nodeAffinity" }}
{{- with $rest }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- end -}}

