package envtestsuite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RolesFile is the operator's generated RBAC (make generate, from the
// +kubebuilder:rbac markers), relative to the module's root.
const RolesFile = "config/rbac/role.yaml"

// RoleNamespace is the placeholder namespace of the generated Roles (the
// namespaced markers name it); the chart, and AsOperator, put those Roles in
// the operator's own namespace.
const RoleNamespace = "weighstation-system"

// rbacTimeout bounds the wait for the apiserver's authorizer to see new
// bindings (it learns of them from its informers).
const rbacTimeout = 30 * time.Second

// ServiceAccountUser is the user name of a ServiceAccount, as the
// apiserver authenticates its tokens.
func ServiceAccountUser(namespace, name string) string {
	return fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name)
}

// AsOperator gives a new ServiceAccount name, in the operator's namespace
// (created if missing), the operator's generated RBAC and nothing else: the
// ClusterRoles of RolesFile bound cluster-wide, and its Roles moved from
// RoleNamespace into namespace and bound there. It returns a copy of admin
// that impersonates the ServiceAccount, once the apiserver authorizes every
// rule for it. It refuses roles with a wildcard group, resource or verb.
// Calling it again for another namespace or name in the same apiserver
// adds that account. With $WEIGHSTATION_TEST_RBAC=chart it is
// AsOperatorFromChart instead.
func AsOperator(ctx context.Context, admin *rest.Config, namespace, name string) (*rest.Config, error) {
	if os.Getenv(RBACSourceEnv) == "chart" {
		return AsOperatorFromChart(ctx, admin, namespace, name)
	}
	clusterRoles, roles, err := ReadRoles()
	if err != nil {
		return nil, err
	}
	c, err := adminClient(admin)
	if err != nil {
		return nil, err
	}
	user := ServiceAccountUser(namespace, name)
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
	}
	for _, cr := range clusterRoles {
		objs = append(objs, cr, &rbacv1.ClusterRoleBinding{
			// One binding per account: several accounts share the role.
			ObjectMeta: metav1.ObjectMeta{Name: cr.Name + ":" + namespace + ":" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects:   subjects,
		})
	}
	for _, r := range roles {
		r.Namespace = namespace
		objs = append(objs, r, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: r.Name + ":" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
			Subjects:   subjects,
		})
	}
	for _, o := range objs {
		if err := createOrUpdate(ctx, c, o); err != nil {
			return nil, err
		}
	}
	if err := waitAuthorized(ctx, c, user, namespace, clusterRoles, roles); err != nil {
		return nil, err
	}
	as := rest.CopyConfig(admin)
	// With no groups given, the apiserver gives an impersonated
	// ServiceAccount its usual groups (system:serviceaccounts and
	// system:serviceaccounts:<namespace>).
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	return as, nil
}

// createOrUpdate creates o, or replaces the rules of a role that exists
// (an earlier call in the same apiserver). Bindings, namespaces and
// accounts that exist are kept: their content is fixed by their names.
func createOrUpdate(ctx context.Context, c client.Client, o client.Object) error {
	err := c.Create(ctx, o)
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("creating %T %s: %w", o, client.ObjectKeyFromObject(o), err)
		}
		return nil
	}
	var rules []rbacv1.PolicyRule
	switch role := o.(type) {
	case *rbacv1.ClusterRole:
		rules = role.Rules
	case *rbacv1.Role:
		rules = role.Rules
	default:
		return nil
	}
	existing := o.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(o), existing); err != nil {
		return fmt.Errorf("reading %T %s: %w", o, client.ObjectKeyFromObject(o), err)
	}
	switch role := existing.(type) {
	case *rbacv1.ClusterRole:
		role.Rules = rules
	case *rbacv1.Role:
		role.Rules = rules
	}
	if err := c.Update(ctx, existing); err != nil {
		return fmt.Errorf("updating %T %s: %w", o, client.ObjectKeyFromObject(o), err)
	}
	return nil
}

// waitAuthorized waits until the apiserver allows user every verb of every
// rule: the authorizer learns of new roles and bindings from informers,
// which may lag a create.
func waitAuthorized(ctx context.Context, c client.Client, user, namespace string, clusterRoles []*rbacv1.ClusterRole, roles []*rbacv1.Role) error {
	var reviews []authorizationv1.ResourceAttributes
	add := func(ns string, rules []rbacv1.PolicyRule) {
		for _, rule := range rules {
			for _, verb := range rule.Verbs {
				a := authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: rule.APIGroups[0], Resource: rule.Resources[0]}
				if resource, sub, ok := strings.Cut(a.Resource, "/"); ok {
					a.Resource, a.Subresource = resource, sub
				}
				if len(rule.ResourceNames) > 0 {
					a.Name = rule.ResourceNames[0]
				}
				reviews = append(reviews, a)
			}
		}
	}
	for _, cr := range clusterRoles {
		add("", cr.Rules)
	}
	for _, r := range roles {
		add(namespace, r.Rules)
	}
	deadline := time.Now().Add(rbacTimeout)
	for {
		var denied []string
		for _, attrs := range reviews {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               user,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
				ResourceAttributes: &attrs,
			}}
			if err := c.Create(ctx, sar); err != nil {
				return fmt.Errorf("reviewing access of %s: %w", user, err)
			}
			if !sar.Status.Allowed {
				denied = append(denied, fmt.Sprintf("%+v", attrs))
			}
		}
		if len(denied) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is still denied after %s: %v", user, rbacTimeout, denied)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReadRoles reads RolesFile: its ClusterRoles and its Roles (still in
// RoleNamespace). It refuses a wildcard group, resource or verb, and a
// Role in another namespace than the placeholder.
func ReadRoles() ([]*rbacv1.ClusterRole, []*rbacv1.Role, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(root, RolesFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	decode := clientgoscheme.Codecs.UniversalDeserializer().Decode
	var (
		clusterRoles []*rbacv1.ClusterRole
		roles        []*rbacv1.Role
	)
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := decode(doc, nil, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			if err := noWildcards(o.Rules); err != nil {
				return nil, nil, fmt.Errorf("%s: ClusterRole %s: %w", path, o.Name, err)
			}
			clusterRoles = append(clusterRoles, o)
		case *rbacv1.Role:
			if err := noWildcards(o.Rules); err != nil {
				return nil, nil, fmt.Errorf("%s: Role %s: %w", path, o.Name, err)
			}
			if o.Namespace != RoleNamespace {
				return nil, nil, fmt.Errorf("%s: Role %s is in namespace %q, not the placeholder %q", path, o.Name, o.Namespace, RoleNamespace)
			}
			roles = append(roles, o)
		default:
			return nil, nil, fmt.Errorf("%s: unexpected %T", path, obj)
		}
	}
	if len(clusterRoles) == 0 {
		return nil, nil, fmt.Errorf("%s holds no ClusterRole", path)
	}
	return clusterRoles, roles, nil
}

// noWildcards refuses "*" as a group, resource or verb, and rules on
// non-resource URLs (which the operator never needs).
func noWildcards(rules []rbacv1.PolicyRule) error {
	for _, rule := range rules {
		if slices.Contains(rule.APIGroups, rbacv1.APIGroupAll) || slices.Contains(rule.Resources, rbacv1.ResourceAll) ||
			slices.Contains(rule.Verbs, rbacv1.VerbAll) || len(rule.NonResourceURLs) > 0 {
			return fmt.Errorf("a wildcard or non-resource rule: %+v", rule)
		}
		if len(rule.APIGroups) == 0 || len(rule.Resources) == 0 || len(rule.Verbs) == 0 {
			return fmt.Errorf("an incomplete rule: %+v", rule)
		}
	}
	return nil
}

// moduleRoot is the nearest directory, from the working directory (a test
// package's own) up, that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// ImpersonatingKubeconfig returns kubeconfig (a kubeconfig file's content,
// such as envtest's admin one) with every user impersonating user, for a
// process that must run with that user's rights (`kubectl --as`, in a
// file).
func ImpersonatingKubeconfig(kubeconfig []byte, user string) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	return clientcmd.Write(*cfg)
}

// adminClient is a client of the built-in kinds with admin's credentials,
// for creating the operator's account and its RBAC.
func adminClient(admin *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(admin, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the admin client: %w", err)
	}
	return c, nil
}
