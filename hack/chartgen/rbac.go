package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// placeholderNamespace is the namespace the namespaced +kubebuilder:rbac
// markers name; the chart puts those Roles in the release's namespace.
const placeholderNamespace = "weighstation-system"

// namePrefix starts every generated role's name; the chart replaces it by
// the release's full name, so that two releases' roles never collide.
const namePrefix = "weighstation"

// rbacTemplate turns the generated ClusterRoles and Roles into the chart's:
// named after the release, the Roles in its namespace, each bound to the
// operator's ServiceAccount. It refuses what the chart must never grant.
func rbacTemplate(source string, data []byte) ([]byte, error) {
	var b strings.Builder
	b.WriteString(header(source))
	b.WriteString("# The operator's least-privilege RBAC, each role bound to its ServiceAccount.\n")
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	roles := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var role struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal(doc, &role); err != nil {
			return nil, err
		}
		if err := checkRules(role.Kind, role.Rules); err != nil {
			return nil, fmt.Errorf("%s %s: %w", role.Kind, role.Metadata.Name, err)
		}
		suffix, ok := strings.CutPrefix(role.Metadata.Name, namePrefix)
		if !ok {
			return nil, fmt.Errorf("%s %s: the name does not start with %q", role.Kind, role.Metadata.Name, namePrefix)
		}
		name := `{{ include "weighstation.fullname" . }}` + suffix
		rules, err := yaml.Marshal(role.Rules)
		if err != nil {
			return nil, err
		}
		switch role.Kind {
		case "ClusterRole":
			fmt.Fprintf(&b, roleTemplate, role.Kind, "", name, escape(rules))
		case "Role":
			if role.Metadata.Namespace != placeholderNamespace {
				return nil, fmt.Errorf("Role %s is in %q, not the markers' placeholder %q", role.Metadata.Name, role.Metadata.Namespace, placeholderNamespace)
			}
			fmt.Fprintf(&b, roleTemplate, role.Kind, releaseNamespace, name, escape(rules))
		default:
			return nil, fmt.Errorf("unexpected kind %q", role.Kind)
		}
		roles++
	}
	if roles == 0 {
		return nil, errors.New("no roles")
	}
	return []byte(b.String()), nil
}

// checkRules refuses wildcards, non-resource URLs and, in a ClusterRole,
// Secrets: the operator reads its own CA Secret alone, through a Role.
func checkRules(kind string, rules []rbacv1.PolicyRule) error {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, rbacv1.APIGroupAll) || slices.Contains(r.Resources, rbacv1.ResourceAll) ||
			slices.Contains(r.Verbs, rbacv1.VerbAll) || len(r.NonResourceURLs) > 0 {
			return fmt.Errorf("a wildcard or non-resource rule: %+v", r)
		}
		if kind == "ClusterRole" && slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "secrets") {
			return fmt.Errorf("cluster-wide access to Secrets: %+v", r)
		}
	}
	return nil
}

// roleTemplate renders a Role or a ClusterRole and its binding to the
// operator's ServiceAccount: kind, the namespace line (empty for a
// cluster-wide role), the name and the rules.
const roleTemplate = `---
apiVersion: rbac.authorization.k8s.io/v1
kind: %[1]s
metadata:
  name: %[3]s
%[2]s  labels:
    {{- include "weighstation.operator.labels" . | nindent 4 }}
rules:
%[4]s---
apiVersion: rbac.authorization.k8s.io/v1
kind: %[1]sBinding
metadata:
  name: %[3]s
%[2]s  labels:
    {{- include "weighstation.operator.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: %[1]s
  name: %[3]s
subjects:
- kind: ServiceAccount
  namespace: {{ .Release.Namespace }}
  name: {{ include "weighstation.operator.serviceAccountName" . }}
`

// releaseNamespace is a namespaced role's namespace line.
const releaseNamespace = "  namespace: {{ .Release.Namespace }}\n"
