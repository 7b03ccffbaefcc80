package injectionproof

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// Names the proof is about. The webhook package uses the same names for
// what it injects (webhook.ContainerName is SidecarContainer).
const (
	// Annotation carries the proof.
	Annotation = "weighstation.io/injection-proof"
	// SidecarContainer is the injected sidecar's container name.
	SidecarContainer = "weighstation-sidecar"
	// TokenVolume is the injected volume that projects the sidecar's
	// token.
	TokenVolume = "weighstation-xds-token"
)

// proofVersion is the claims' format, and part of what the MAC covers: a
// later format can never be read as this one.
const proofVersion = 1

// ErrNotProven wraps every reason Verify refuses a pod: callers test for
// it with errors.Is, and show the message, which names what differs.
var ErrNotProven = errors.New("the pod's sidecar is not one the operator's sidecar injector injected")

// claims are the annotation's document.
type claims struct {
	Version int `json:"v"`
	// ServiceAccount is spec.serviceAccountName.
	ServiceAccount string `json:"sa"`
	// Audience is the sidecar's token audience.
	Audience string `json:"aud"`
	// Injected is the weighstation.io/injected annotation's value.
	Injected string `json:"injected"`
	// Sidecar and Tokens are hex SHA-256 digests (sidecarFacts,
	// tokenFacts).
	Sidecar string `json:"sidecar"`
	Tokens  string `json:"tokens"`
	// MAC is the base64 HMAC-SHA256 of the rest and the namespace.
	MAC string `json:"mac"`
}

// Sign returns the proof for pod, which the webhook has just injected (or
// found injected as it injects) with a sidecar whose token is for
// audience. The pod must have the sidecar container and the injected
// annotation.
func Sign(pod *corev1.Pod, audience string, key []byte) (string, error) {
	if len(key) == 0 {
		return "", errors.New("signing the injection proof: no key")
	}
	sidecar, ok := sidecarOf(pod)
	if !ok {
		return "", fmt.Errorf("signing the injection proof: the pod has no %s init container", SidecarContainer)
	}
	injected, ok := pod.Annotations[v1alpha1.InjectedAnnotation]
	if !ok {
		return "", fmt.Errorf("signing the injection proof: the pod has no %s annotation", v1alpha1.InjectedAnnotation)
	}
	c := claims{
		Version:        proofVersion,
		ServiceAccount: pod.Spec.ServiceAccountName,
		Audience:       audience,
		Injected:       injected,
		Sidecar:        sidecarDigest(sidecar),
		Tokens:         digest(tokenLayout(pod, audience)),
	}
	c.MAC = base64.StdEncoding.EncodeToString(c.mac(key, pod.Namespace))
	out, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encoding the injection proof: %w", err)
	}
	return string(out), nil
}

// Verify returns nil when pod carries a proof that key made for it (see
// the package's documentation), and an ErrNotProven that names the first
// thing that does not match otherwise: the annotation missing or not
// written with key for the pod's namespace, the service account, the
// injected annotation, the sidecar container, the token volumes and their
// mounts, or an isolation check (Isolation) that the pod now fails.
func Verify(pod *corev1.Pod, key []byte) error {
	if len(key) == 0 {
		return errors.New("verifying the injection proof: no key (the operator has not loaded the Secret " + SecretName + " yet)")
	}
	raw, ok := pod.Annotations[Annotation]
	if !ok {
		return fmt.Errorf("%w: the pod has no %s annotation", ErrNotProven, Annotation)
	}
	var c claims
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return fmt.Errorf("%w: annotation %s is not a proof: %w", ErrNotProven, Annotation, err)
	}
	if c.Version != proofVersion {
		return fmt.Errorf("%w: annotation %s has version %d, this operator reads %d", ErrNotProven, Annotation, c.Version, proofVersion)
	}
	mac, err := base64.StdEncoding.DecodeString(c.MAC)
	if err != nil || !hmac.Equal(mac, c.mac(key, pod.Namespace)) {
		return fmt.Errorf("%w: annotation %s was not written by this operator's sidecar injector for a pod in namespace %s", ErrNotProven, Annotation, pod.Namespace)
	}
	// The claims are the injector's: now compare them with the pod.
	if sa := pod.Spec.ServiceAccountName; sa != c.ServiceAccount {
		return fmt.Errorf("%w: spec.serviceAccountName is %q, the injector signed %q", ErrNotProven, sa, c.ServiceAccount)
	}
	if injected, ok := pod.Annotations[v1alpha1.InjectedAnnotation]; !ok || injected != c.Injected {
		return fmt.Errorf("%w: annotation %s is %q, the injector signed %q", ErrNotProven, v1alpha1.InjectedAnnotation, injected, c.Injected)
	}
	sidecar, ok := sidecarOf(pod)
	if !ok {
		return fmt.Errorf("%w: the pod has no %s init container", ErrNotProven, SidecarContainer)
	}
	if sidecarDigest(sidecar) != c.Sidecar {
		return fmt.Errorf("%w: the %s container (its image, command, args, env, volume mounts or securityContext) is not the one the injector signed", ErrNotProven, SidecarContainer)
	}
	if layout := tokenLayout(pod, c.Audience); digest(layout) != c.Tokens {
		return fmt.Errorf("%w: the volumes that hold a token for audience %s, or the containers that mount them, are not those the injector signed: the pod has %s", ErrNotProven, c.Audience, layout)
	}
	uid := int64(-1)
	if sidecar.SecurityContext != nil && sidecar.SecurityContext.RunAsUser != nil {
		uid = *sidecar.SecurityContext.RunAsUser
	}
	if err := Isolation(pod, uid); err != nil {
		return fmt.Errorf("%w: %w", ErrNotProven, err)
	}
	return nil
}

// mac is the HMAC-SHA256 of the claims (less the MAC) and namespace, each
// field length-prefixed so that no two sets of fields encode alike.
func (c claims) mac(key []byte, namespace string) []byte {
	h := hmac.New(sha256.New, key)
	var n [8]byte
	for _, field := range []string{Annotation, fmt.Sprint(c.Version), namespace, c.ServiceAccount, c.Audience, c.Injected, c.Sidecar, c.Tokens} {
		binary.BigEndian.PutUint64(n[:], uint64(len(field)))
		h.Write(n[:])
		h.Write([]byte(field))
	}
	return h.Sum(nil)
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sidecarOf returns the pod's sidecar: an init container (a native
// sidecar) named SidecarContainer.
func sidecarOf(pod *corev1.Pod) (*corev1.Container, bool) {
	i := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == SidecarContainer })
	if i < 0 {
		return nil, false
	}
	return &pod.Spec.InitContainers[i], true
}

// sidecarFacts are the parts of the sidecar container that the digest
// covers: what decides what runs, as whom, and with which files. Left out
// are what the apiserver defaults after the webhook (termination message,
// pull policy, probe timings, a fieldRef's apiVersion) and what may change
// after creation without touching the sidecar's trust (resources, which an
// in-place resize changes).
type sidecarFacts struct {
	Image         string                  `json:"image"`
	Command       []string                `json:"command"`
	Args          []string                `json:"args"`
	Env           []envFact               `json:"env"`
	EnvFrom       []corev1.EnvFromSource  `json:"envFrom"`
	Mounts        []mountFact             `json:"mounts"`
	RestartPolicy string                  `json:"restartPolicy"`
	Security      *corev1.SecurityContext `json:"security"`
}

type envFact struct {
	Name  string               `json:"name"`
	Value string               `json:"value"`
	From  *corev1.EnvVarSource `json:"from"`
}

type mountFact struct {
	Name        string `json:"name"`
	MountPath   string `json:"mountPath"`
	ReadOnly    bool   `json:"readOnly"`
	SubPath     string `json:"subPath"`
	SubPathExpr string `json:"subPathExpr"`
}

// serviceAccountTokenDir is where the ServiceAccount admission plugin
// mounts the pod's API token into every container that lacks it. The
// apiserver runs that plugin again after the webhook injected the sidecar
// (a reinvocation), which then adds the mount to the sidecar too; the
// webhook is reinvoked after it and signs again, but the mount is left
// out of the digest all the same: it gives the sidecar the credential
// every container of the pod has, and should a reinvocation not reach
// the webhook, the proof must not break over it.
const serviceAccountTokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func sidecarDigest(c *corev1.Container) string {
	f := sidecarFacts{Image: c.Image, Command: c.Command, Args: c.Args, EnvFrom: c.EnvFrom, Security: c.SecurityContext}
	if c.RestartPolicy != nil {
		f.RestartPolicy = string(*c.RestartPolicy)
	}
	for _, e := range c.Env {
		from := e.ValueFrom.DeepCopy()
		if from != nil && from.FieldRef != nil {
			from.FieldRef.APIVersion = "" // defaulted to v1 after the webhook
		}
		if from != nil && from.ResourceFieldRef != nil {
			from.ResourceFieldRef.Divisor = resource.Quantity{} // defaulted to 1
		}
		f.Env = append(f.Env, envFact{Name: e.Name, Value: e.Value, From: from})
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == serviceAccountTokenDir {
			continue
		}
		f.Mounts = append(f.Mounts, mountFact{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly, SubPath: m.SubPath, SubPathExpr: m.SubPathExpr})
	}
	// Marshalling a struct of slices and pointers is deterministic.
	out, err := json.Marshal(f)
	if err != nil {
		// Nothing in a decoded container fails to encode again.
		panic(fmt.Sprintf("encoding the sidecar's facts: %v", err))
	}
	return digest(string(out))
}

// tokenLayout describes the volumes that hold a token for audience (the
// sidecar's token volume, whatever it projects, and any volume that
// projects a ServiceAccount token for audience) and, for each, the init
// and application containers that mount it, in the pod's order. It is
// readable, for Verify's message: "volume weighstation-xds-token
// (audience weighstation.io/xds, path token) mounted by
// weighstation-sidecar". Ephemeral containers are not in it: they are
// added after creation, and Isolation refuses those that mount one.
func tokenLayout(pod *corev1.Pod, audience string) string {
	var parts []string
	for _, v := range pod.Spec.Volumes {
		projections := tokenProjections(v)
		if v.Name != TokenVolume && !slices.ContainsFunc(projections, func(p corev1.ServiceAccountTokenProjection) bool { return p.Audience == audience }) {
			continue
		}
		var what []string
		for _, p := range projections {
			exp := int64(0)
			if p.ExpirationSeconds != nil {
				exp = *p.ExpirationSeconds
			}
			what = append(what, fmt.Sprintf("audience %s, path %s, %ds", p.Audience, p.Path, exp))
		}
		if len(what) == 0 {
			what = []string{"no token"}
		}
		mounters := mountersOf(pod, v.Name, false)
		if len(mounters) == 0 {
			mounters = []string{"no container"}
		}
		parts = append(parts, fmt.Sprintf("volume %s (%s) mounted by %s", v.Name, strings.Join(what, "; "), strings.Join(mounters, ", ")))
	}
	if len(parts) == 0 {
		return "no such volume"
	}
	return strings.Join(parts, "; ")
}

// tokenProjections are the ServiceAccount tokens v projects.
func tokenProjections(v corev1.Volume) []corev1.ServiceAccountTokenProjection {
	if v.Projected == nil {
		return nil
	}
	var out []corev1.ServiceAccountTokenProjection
	for _, src := range v.Projected.Sources {
		if src.ServiceAccountToken != nil {
			out = append(out, *src.ServiceAccountToken)
		}
	}
	return out
}

// mountersOf names the containers that mount volume: init and
// application containers, and ephemeral ones with ephemeral.
func mountersOf(pod *corev1.Pod, volume string, ephemeral bool) []string {
	var names []string
	mounts := func(ms []corev1.VolumeMount) bool {
		return slices.ContainsFunc(ms, func(m corev1.VolumeMount) bool { return m.Name == volume })
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if mounts(c.VolumeMounts) {
				names = append(names, c.Name)
			}
		}
	}
	if ephemeral {
		for _, c := range pod.Spec.EphemeralContainers {
			if mounts(c.VolumeMounts) {
				names = append(names, c.Name)
			}
		}
	}
	return names
}
