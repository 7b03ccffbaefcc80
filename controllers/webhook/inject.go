package webhook

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/injectionproof"
	"github.com/weighstation/weighstation/controllers/pki"
)

// Names the injection gives a pod. The container's name is what tells an
// injected pod apart, with InjectedAnnotation.
const (
	ContainerName = injectionproof.SidecarContainer
	// InjectedAnnotation records the operator version that injected the
	// pod. A pod that has it and the container is left as it is; the
	// operator reports opted-in pods without it (PodsWithoutSidecar).
	InjectedAnnotation = v1alpha1.InjectedAnnotation
	// SidecarBinary is the sidecar's own binary in the operator's image:
	// a binary of its own, so the sidecar pays for none of the operator's
	// packages in memory.
	SidecarBinary = "/weighstation-sidecar"

	tokenVolume = injectionproof.TokenVolume
	caVolume    = "weighstation-ca"
	tokenDir    = "/var/run/secrets/weighstation.io/xds"
	caDir       = "/etc/weighstation/ca"
)

// Ports of the sidecar on the pod's address. The pod's containers share
// it, so they are declared on the container, where a clash shows.
const (
	DefaultHealthPort  = 9090
	DefaultMetricsPort = 9091
	// MinTokenExpiration is the least the kubelet and the apiserver accept
	// for a projected token (10 minutes).
	MinTokenExpiration = 600
)

// DefaultRunAsUser is the sidecar's UID and GID unless -sidecar-run-as-user
// says otherwise: one of its own, so that no application shares it by
// accident. Not 65532, the distroless images' nonroot user, which many
// applications run as; not Istio's 1337 or Linkerd's 2102, whose proxies
// may share a pod with it.
const DefaultRunAsUser = 65533

// distrolessNonroot is the UID that distroless images' USER nonroot is.
const distrolessNonroot = 65532

// Prometheus's pod annotations, the kubernetes_sd convention (one port per
// pod). Inject adds the first three for the sidecar's /metrics
// (Config.PrometheusAnnotations) to a pod that has none of the four.
const (
	PrometheusScrapeAnnotation = "prometheus.io/scrape"
	PrometheusPortAnnotation   = "prometheus.io/port"
	PrometheusPathAnnotation   = "prometheus.io/path"
	PrometheusSchemeAnnotation = "prometheus.io/scheme"
)

// ErrClaimedSidecar refuses a pod that already has a container named
// ContainerName that this webhook did not add: the sidecar would run
// twice, or a container of the pod's choosing would pose as it.
var ErrClaimedSidecar = errors.New("the pod already has a container named " + ContainerName + " that the sidecar injector did not add (no " + InjectedAnnotation + " annotation): remove it and let the webhook add the sidecar, or turn injection off for this pod (label " + v1alpha1.InjectLabel + ")")

// forgedSidecar refuses a pod that carries InjectedAnnotation beside a
// sidecar that the injector did not make: the annotation is the pod's to
// write. It is an ErrClaimedSidecar, with a message of its own (the
// annotation is there).
type forgedSidecar struct{ what string }

func (e forgedSidecar) Error() string {
	return "the pod carries the " + InjectedAnnotation + " annotation, but " + e.what + ": the sidecar injector did not add them; remove the container and the annotation and let the webhook add the sidecar, or turn injection off for this pod (label " + v1alpha1.InjectLabel + ")"
}

func (e forgedSidecar) Is(target error) bool { return target == ErrClaimedSidecar }

// ErrSidecarToken refuses a pod whose own containers could read a token
// for the sidecar's audience: with it, a container of the pod would pass
// the operator's TokenReview as the pod, and be issued the sidecar's
// broker credential.
var ErrSidecarToken = errors.New("only the sidecar may hold a token for its audience (it proves the pod to the operator, which issues the pod's broker credential on it)")

// ErrNotIsolated refuses a pod whose other containers could reach into
// the sidecar; the wrapped injectionproof.IsolationError names the fields.
var ErrNotIsolated = errors.New("the pod would not keep the weighstation sidecar apart from its other containers")

// Config is what every injected sidecar gets.
type Config struct {
	// Image is the operator's own image, which holds SidecarBinary.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// Operator is the xDS address (Service DNS name:port), the sidecar's
	// -operator.
	Operator string
	// Broker is the sidecar's -broker URL.
	Broker string
	// Audience and TokenExpirationSeconds are the projected
	// ServiceAccount token's, by which the operator knows the pod.
	Audience               string
	TokenExpirationSeconds int64
	// Version goes into InjectedAnnotation.
	Version     string
	Resources   Resources
	HealthPort  int32
	MetricsPort int32
	// PrometheusAnnotations has Inject add prometheus.io/scrape, port
	// (MetricsPort) and path (/metrics) to the pods it injects, so that a
	// Prometheus that discovers pods by those annotations scrapes the
	// sidecar (the operator's -sidecar-prometheus-annotations; the chart's
	// metrics.annotations).
	PrometheusAnnotations bool
	// RunAsUser is the sidecar's UID and GID (-sidecar-run-as-user; the
	// chart's sidecar.runAsUser). No other container of the pod may run
	// as it (injectionproof.Isolation).
	RunAsUser int64
}

// Validate refuses a Config that would inject a broken sidecar, naming
// the operator's flags.
func (c Config) Validate() error {
	switch {
	case c.Image == "":
		return errors.New("-sidecar-image is required with -webhook-configuration: the sidecar runs " + SidecarBinary + " from the operator's own image")
	case c.Operator == "":
		return errors.New("the sidecar's -operator address (the xDS Service DNS name and port) is required")
	case c.Broker == "":
		return errors.New("-sidecar-broker is required with -webhook-configuration: the sidecar's -broker URL")
	case c.Audience == "":
		return errors.New("-xds-audience must not be empty")
	case c.TokenExpirationSeconds < MinTokenExpiration:
		return fmt.Errorf("-sidecar-token-expiration must be at least 10m (the apiserver refuses shorter projected tokens), got %ds", c.TokenExpirationSeconds)
	case c.RunAsUser <= 0:
		return fmt.Errorf("-sidecar-run-as-user must be a UID above 0 (the sidecar runs as non-root, as a user of its own), got %d", c.RunAsUser)
	case c.RunAsUser == distrolessNonroot:
		return fmt.Errorf("-sidecar-run-as-user must not be %d: that is the distroless images' nonroot user, which many applications run as, and the sidecar's UID must be its own", distrolessNonroot)
	}
	if err := c.Resources.Validate(); err != nil {
		return fmt.Errorf("the sidecar's resources: %w", err)
	}
	return nil
}

// Inject adds the sidecar to pod, in place. It returns false, and leaves
// pod alone, when pod was injected already (the annotation and the
// container as this injector makes them), so that a re-invocation changes
// nothing. It refuses a pod that claims the sidecar's container name
// without the annotation (ErrClaimedSidecar) or with a container other than
// the one it would add, a pod whose other containers could read a token
// for the sidecar's audience (ErrSidecarToken), a pod that would not keep
// the sidecar apart from its other containers (injectionproof.Isolation:
// a shared process namespace, the host's PID namespace or network, a
// container running as the sidecar's UID), resource annotations out of
// bounds, and a pod that already uses the sidecar's volume names. Every
// refusal names the pod's field, annotation, container or volume.
func Inject(pod *corev1.Pod, c Config) (bool, error) {
	if hasContainer(pod, ContainerName) {
		if _, ok := pod.Annotations[InjectedAnnotation]; !ok {
			return false, ErrClaimedSidecar
		}
		// The annotation is the pod's to write: the sidecar and its volumes
		// must be exactly what this injector adds, or a container of the
		// pod's choosing would hold the sidecar's token.
		if err := checkSidecarIsOurs(pod, c); err != nil {
			return false, err
		}
		if err := checkTokenHolders(pod, c); err != nil {
			return false, err
		}
		return false, isolated(pod, c)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == tokenVolume || v.Name == caVolume {
			return false, fmt.Errorf("the pod already has a volume named %s, which the sidecar injector adds for the sidecar: rename it", v.Name)
		}
	}
	if err := checkTokenHolders(pod, c); err != nil {
		return false, err
	}
	if err := isolated(pod, c); err != nil {
		return false, err
	}
	res, err := c.Resources.For(pod.Annotations)
	if err != nil {
		return false, err
	}
	// First among the init containers: a native sidecar starts before the
	// init containers after it, which may then use the mesh too.
	pod.Spec.InitContainers = append([]corev1.Container{container(c, res)}, pod.Spec.InitContainers...)
	pod.Spec.Volumes = append(pod.Spec.Volumes, volumes(c)...)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	// The label is how the operator finds sidecar pods (its pod cache
	// holds only these), whichever way the pod opted in.
	pod.Labels[v1alpha1.InjectLabel] = v1alpha1.InjectEnabled
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[InjectedAnnotation] = c.Version
	if c.PrometheusAnnotations {
		addPrometheusAnnotations(pod.Annotations, c.MetricsPort)
	}
	return true, nil
}

// addPrometheusAnnotations points Prometheus at the sidecar's /metrics,
// unless the pod has prometheus.io annotations of its own. The convention
// allows one port per pod, so the application's own metrics (or its
// prometheus.io/scrape: "false") win, and the sidecar is then left out:
// overwriting one of them would stop the application's scrape, and adding
// the others beside it would send its scrape to the wrong port, path or
// scheme. Such a pod's sidecar is scraped only by a configuration that
// selects its ws-metrics port (a PodMonitor, say).
func addPrometheusAnnotations(annotations map[string]string, port int32) {
	for _, k := range []string{PrometheusScrapeAnnotation, PrometheusPortAnnotation, PrometheusPathAnnotation, PrometheusSchemeAnnotation} {
		if _, ok := annotations[k]; ok {
			return
		}
	}
	annotations[PrometheusScrapeAnnotation] = "true"
	annotations[PrometheusPortAnnotation] = strconv.Itoa(int(port))
	annotations[PrometheusPathAnnotation] = "/metrics"
}

// isolated refuses a pod that would not keep the sidecar apart from its
// other containers (injectionproof.Isolation).
func isolated(pod *corev1.Pod, c Config) error {
	uid := c.RunAsUser
	if uid <= 0 {
		uid = -1 // no UID of its own (a Config that was not validated)
	}
	if err := injectionproof.Isolation(pod, uid); err != nil {
		return fmt.Errorf("%w: %w (a pod that needs this runs without the sidecar: label it %s: %s)", ErrNotIsolated, err, v1alpha1.InjectLabel, InjectDisabled)
	}
	return nil
}

// checkTokenHolders refuses a pod in which a container other than the
// sidecar mounts the sidecar's token volume, or a volume other than it
// projects a token for the sidecar's audience.
func checkTokenHolders(pod *corev1.Pod, c Config) error {
	for _, v := range pod.Spec.Volumes {
		if v.Name != tokenVolume && projectsTokenFor(v, c.Audience) {
			return fmt.Errorf("%w: volume %s projects a ServiceAccount token for audience %s", ErrSidecarToken, v.Name, c.Audience)
		}
	}
	if name, ok := mountsVolume(pod, tokenVolume); ok {
		return fmt.Errorf("%w: container %s mounts volume %s", ErrSidecarToken, name, tokenVolume)
	}
	return nil
}

// checkSidecarIsOurs refuses a pod whose sidecar container does not run
// what Inject adds with c (the image, command and arguments: the sidecar's
// binary is what keeps the token and the credential from the rest of the
// pod), or whose sidecar token volume is not the one Inject adds. The
// apiserver defaults what Inject leaves out before a re-invocation, so the
// rest is not compared.
func checkSidecarIsOurs(pod *corev1.Pod, c Config) error {
	want := container(c, corev1.ResourceRequirements{})
	i := slices.IndexFunc(pod.Spec.InitContainers, func(ctr corev1.Container) bool { return ctr.Name == ContainerName })
	if i < 0 {
		return forgedSidecar{"its " + ContainerName + " container is not a native sidecar (an init container)"}
	}
	have := pod.Spec.InitContainers[i]
	if have.Image != want.Image || !slices.Equal(have.Command, want.Command) || !slices.Equal(have.Args, want.Args) {
		return forgedSidecar{"its " + ContainerName + " container does not run the injector's image, command and arguments"}
	}
	// As whom it runs is what keeps the application out of it.
	if !equality.Semantic.DeepEqual(have.SecurityContext, want.SecurityContext) {
		return forgedSidecar{"its " + ContainerName + " container's securityContext is not the injector's (runAsUser " + strconv.FormatInt(c.RunAsUser, 10) + ", read-only, no privilege)"}
	}
	wantToken := volumes(c)[0].Projected.Sources[0].ServiceAccountToken
	j := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == tokenVolume })
	if j < 0 || pod.Spec.Volumes[j].Projected == nil || len(pod.Spec.Volumes[j].Projected.Sources) != 1 ||
		pod.Spec.Volumes[j].Projected.Sources[0].ServiceAccountToken == nil ||
		pod.Spec.Volumes[j].Projected.Sources[0].ServiceAccountToken.Audience != wantToken.Audience {
		return forgedSidecar{"its volume " + tokenVolume + " is not the sidecar's token for audience " + c.Audience}
	}
	return nil
}

// projectsTokenFor reports whether v projects a ServiceAccount token for
// audience.
func projectsTokenFor(v corev1.Volume, audience string) bool {
	if v.Projected == nil {
		return false
	}
	for _, src := range v.Projected.Sources {
		if src.ServiceAccountToken != nil && src.ServiceAccountToken.Audience == audience {
			return true
		}
	}
	return false
}

// mountsVolume returns a container of pod (an init, application or
// ephemeral one) other than the sidecar that mounts the volume named
// volume. (Inject refuses a container named like the sidecar that it did
// not add before it asks.)
func mountsVolume(pod *corev1.Pod, volume string) (string, bool) {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, ctr := range list {
			if ctr.Name == ContainerName {
				continue
			}
			for _, m := range ctr.VolumeMounts {
				if m.Name == volume {
					return ctr.Name, true
				}
			}
		}
	}
	for _, ctr := range pod.Spec.EphemeralContainers {
		for _, m := range ctr.VolumeMounts {
			if m.Name == volume {
				return ctr.Name, true
			}
		}
	}
	return "", false
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, ctr := range list {
			if ctr.Name == name {
				return true
			}
		}
	}
	return false
}

// container is the sidecar: a native sidecar (an init container that
// restarts, Kubernetes 1.29 and later), so it starts before the
// application and stops after it.
func container(c Config, res corev1.ResourceRequirements) corev1.Container {
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return corev1.Container{
		Name:            ContainerName,
		Image:           c.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		Command:         []string{SidecarBinary},
		Args: []string{
			"-listen=127.0.0.1:4222",
			"-broker=" + c.Broker,
			"-operator=" + c.Operator,
			"-identity-token-file=" + tokenDir + "/token",
			// The sidecar re-reads the bundle, which the kubelet refreshes
			// in the mounted ConfigMap when the CA rotates.
			"-ca-file=" + caDir + "/" + pki.BundleKey,
			"-health-listen=:" + strconv.Itoa(int(c.HealthPort)),
			// On the pod's address, for Prometheus.
			"-metrics-listen=:" + strconv.Itoa(int(c.MetricsPort)),
		},
		// The sidecar's identity: -pod-name, -pod-namespace and -pod-uid
		// default to these.
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_UID", "metadata.uid"),
		},
		Ports: []corev1.ContainerPort{
			{Name: "ws-health", ContainerPort: c.HealthPort, Protocol: corev1.ProtocolTCP},
			{Name: "ws-metrics", ContainerPort: c.MetricsPort, Protocol: corev1.ProtocolTCP},
		},
		Resources:     res,
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		// The application containers start once the sidecar is ready:
		// /readyz answers once it has its configuration.
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("ws-health")}},
			PeriodSeconds:    1,
			FailureThreshold: 120,
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: tokenVolume, MountPath: tokenDir, ReadOnly: true},
			{Name: caVolume, MountPath: caDir, ReadOnly: true},
		},
		SecurityContext: securityContext(c),
	}
}

// securityContext is the sidecar's: non-root, as a UID and GID of its own
// (Config.RunAsUser) whatever the pod's securityContext says, so that the
// application never runs as the sidecar's user; read-only, with no
// privilege or capability.
func securityContext(c Config) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		ReadOnlyRootFilesystem:   ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if c.RunAsUser > 0 {
		sc.RunAsUser, sc.RunAsGroup = ptr.To(c.RunAsUser), ptr.To(c.RunAsUser)
	}
	return sc
}

// volumes are the sidecar's identity token, bound to the pod, and the
// operator's CA bundle. The broker token Secret is not mounted: per-pod
// broker credentials come over xDS.
func volumes(c Config) []corev1.Volume {
	return []corev1.Volume{
		{Name: tokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: c.Audience, ExpirationSeconds: ptr.To(c.TokenExpirationSeconds), Path: "token",
			}}},
		}}},
		{Name: caVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: pki.DefaultBundleConfigMapName},
		}}},
	}
}
