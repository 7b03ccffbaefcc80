package envtestsuite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ChartDir is the Helm chart, relative to the module's root.
const ChartDir = "charts/weighstation"

// RBACSourceEnv set to "chart" makes AsOperator take the RBAC from the
// rendered chart (AsOperatorFromChart) rather than RolesFile, so that any
// suite can be run under the RBAC that `helm install` creates.
const RBACSourceEnv = "WEIGHSTATION_TEST_RBAC"

// chartRelease is the release name the chart is rendered with.
const chartRelease = "weighstation"

// helmTimeout bounds `helm template`.
const helmTimeout = 2 * time.Minute

// AsOperatorFromChart is AsOperator with the chart's RBAC: `helm template`
// (bin/helm, built by hack/setup-envtest.sh, else helm on $PATH) renders
// the chart into namespace with its operator ServiceAccount named name,
// and its ServiceAccount, ClusterRoles, Roles and their bindings are
// created as rendered, so the chart's naming and binding are tested, not
// only its rules. One account per apiserver: the chart's cluster-wide
// names do not depend on the namespace.
func AsOperatorFromChart(ctx context.Context, admin *rest.Config, namespace, name string) (*rest.Config, error) {
	rendered, err := renderChart(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	objs, clusterRoles, roles, err := chartRBAC(rendered, namespace, name)
	if err != nil {
		return nil, err
	}
	c, err := adminClient(admin)
	if err != nil {
		return nil, err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	for _, o := range objs {
		if err := createOrUpdate(ctx, c, o); err != nil {
			return nil, err
		}
		if crb, ok := o.(*rbacv1.ClusterRoleBinding); ok {
			if err := sameSubjects(ctx, c, crb); err != nil {
				return nil, err
			}
		}
	}
	user := ServiceAccountUser(namespace, name)
	if err := waitAuthorized(ctx, c, user, namespace, clusterRoles, roles); err != nil {
		return nil, err
	}
	as := rest.CopyConfig(admin)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	return as, nil
}

// renderChart runs `helm template` on the chart.
func renderChart(ctx context.Context, namespace, name string) ([]byte, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		if helm, err = exec.LookPath("helm"); err != nil {
			return nil, errors.New("no bin/helm and no helm on $PATH: run `make envtest` (hack/setup-envtest.sh builds helm)")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, helmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, "template", chartRelease, filepath.Join(root, ChartDir),
		"--namespace", namespace, "--set-string", "operator.serviceAccount.name="+name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w: %s", ChartDir, err, stderr.String())
	}
	return out, nil
}

// chartRBAC picks from the rendered chart the operator's ServiceAccount,
// roles and bindings (in that order, so that bindings find their roles),
// and refuses a wildcard rule or a binding to anyone else.
func chartRBAC(rendered []byte, namespace, name string) ([]client.Object, []*rbacv1.ClusterRole, []*rbacv1.Role, error) {
	var (
		accounts, roleObjs, bindings []client.Object
		clusterRoles                 []*rbacv1.ClusterRole
		roles                        []*rbacv1.Role
	)
	decode := clientgoscheme.Codecs.UniversalDeserializer().Decode
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(rendered)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, nil, err
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, nil, err
		}
		switch meta.Kind {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue // the chart's workloads and CRDs are not RBAC
		}
		obj, _, err := decode(doc, nil, nil)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("the rendered chart: %w", err)
		}
		if err := allowedRBAC(obj, namespace, name); err != nil {
			return nil, nil, nil, fmt.Errorf("the chart's %s %s: %w", meta.Kind, obj.(client.Object).GetName(), err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			if o.Name == name {
				accounts = append(accounts, o)
			}
		case *rbacv1.ClusterRole:
			clusterRoles = append(clusterRoles, o)
			roleObjs = append(roleObjs, o)
		case *rbacv1.Role:
			roles = append(roles, o)
			roleObjs = append(roleObjs, o)
		case *rbacv1.ClusterRoleBinding, *rbacv1.RoleBinding:
			bindings = append(bindings, o.(client.Object))
		}
	}
	if len(accounts) != 1 || len(clusterRoles) == 0 || len(bindings) != len(clusterRoles)+len(roles) {
		return nil, nil, nil, fmt.Errorf("the rendered chart has %d ServiceAccounts named %s, %d ClusterRoles, %d Roles and %d bindings; want one account and one binding per role",
			len(accounts), name, len(clusterRoles), len(roles), len(bindings))
	}
	return append(append(accounts, roleObjs...), bindings...), clusterRoles, roles, nil
}

// allowedRBAC refuses a role with a wildcard rule or a binding to anyone
// but the operator's account.
func allowedRBAC(obj any, namespace, name string) error {
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		return noWildcards(o.Rules)
	case *rbacv1.Role:
		return noWildcards(o.Rules)
	case *rbacv1.ClusterRoleBinding:
		return onlyAccount(o.Subjects, namespace, name)
	case *rbacv1.RoleBinding:
		return onlyAccount(o.Subjects, namespace, name)
	}
	return nil
}

// onlyAccount refuses a binding to anything but the operator's account.
func onlyAccount(subjects []rbacv1.Subject, namespace, name string) error {
	if len(subjects) != 1 || subjects[0].Kind != rbacv1.ServiceAccountKind || subjects[0].Namespace != namespace || subjects[0].Name != name {
		return fmt.Errorf("binds %+v, want the ServiceAccount %s/%s alone", subjects, namespace, name)
	}
	return nil
}

// sameSubjects refuses a ClusterRoleBinding that an earlier call created
// for another account: createOrUpdate keeps bindings as they are.
func sameSubjects(ctx context.Context, c client.Client, want *rbacv1.ClusterRoleBinding) error {
	got := &rbacv1.ClusterRoleBinding{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
		return fmt.Errorf("reading ClusterRoleBinding %s: %w", want.Name, err)
	}
	if len(got.Subjects) != 1 || got.Subjects[0] != want.Subjects[0] {
		return fmt.Errorf("ClusterRoleBinding %s binds %+v already: the chart's RBAC holds one operator account per apiserver", want.Name, got.Subjects)
	}
	return nil
}
