package brokercreds

import (
	"context"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/xds"
)

// Service answers the sidecars' requests for their broker credential. It
// is served on the xDS listener, behind its authentication: the caller is
// the pod its token is bound to (xds.IdentityFrom).
type Service struct {
	xdsv1.UnimplementedBrokerCredentialsServer
	Keeper *Keeper
	// Bounds are what each pod's credential may allow.
	Bounds *Bounds
	// Pods reads pod metadata: the operator's pod cache.
	Pods    client.Reader
	Metrics *Metrics
	Log     logr.Logger
}

// Register registers the service on a gRPC server.
func (s *Service) Register(r grpc.ServiceRegistrar) { xdsv1.RegisterBrokerCredentialsServer(r, s) }

// Issue returns the caller's credential. It goes only to a pod that the
// sidecar injector injected: the injector refuses a pod whose other
// containers could present the sidecar's token, which is what keeps the
// credential from the application.
func (s *Service) Issue(ctx context.Context, req *xdsv1.IssueBrokerCredentialRequest) (*xdsv1.BrokerCredential, error) {
	id, ok := xds.IdentityFrom(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "a credential request without an identity")
	}
	if req.GetPodUid() != id.PodUID {
		s.Metrics.refused.WithLabelValues("wrong_pod").Inc()
		return nil, status.Errorf(codes.PermissionDenied, "the request names pod UID %q, but the token is bound to %s with UID %s", req.GetPodUid(), id.NodeID(), id.PodUID)
	}
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := s.Pods.Get(ctx, types.NamespacedName{Namespace: id.Namespace, Name: id.Pod}, pod); err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading pod %s: %v", id.NodeID(), err)
	}
	if _, injected := pod.Annotations[v1alpha1.InjectedAnnotation]; !injected || string(pod.UID) != id.PodUID {
		s.Metrics.refused.WithLabelValues("not_injected").Inc()
		s.Log.Info("refused a broker credential to a pod the sidecar injector did not inject", "pod", id.NodeID())
		return nil, status.Errorf(codes.PermissionDenied, "pod %s has no %s annotation: broker credentials go only to sidecars that the sidecar injector added", id.NodeID(), v1alpha1.InjectedAnnotation)
	}
	keys, ok := s.Keeper.Keys()
	if !ok {
		s.Metrics.refused.WithLabelValues("not_ready").Inc()
		return nil, status.Error(codes.Unavailable, "the operator has not read its broker keys yet; retry")
	}
	user, err := keys.UserKey(id.PodUID)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "the user key of %s: %v", id.NodeID(), err)
	}
	bound, ok := s.Bounds.Of(types.NamespacedName{Namespace: id.Namespace, Name: id.Pod}, InboxPrefix(publicKey(user)))
	if !ok {
		s.Metrics.refused.WithLabelValues("not_ready").Inc()
		return nil, status.Errorf(codes.Unavailable, "the operator has not computed the configuration of pod %s yet; retry", id.NodeID())
	}
	cred, err := s.Keeper.Issue(ctx, id.Namespace, id.Pod, id.PodUID, pod.CreationTimestamp.Time, bound, req.GetRenewal())
	if err != nil {
		s.Metrics.refused.WithLabelValues("not_ready").Inc()
		return nil, status.Errorf(codes.Unavailable, "issuing the credential of %s: %v", id.NodeID(), err)
	}
	s.Metrics.issued.Inc()
	s.Log.V(1).Info("issued a broker credential", "pod", id.NodeID(), "user", cred.PublicKey, "expires", cred.Expires, "renewal", req.GetRenewal())
	return &xdsv1.BrokerCredential{UserJwt: cred.JWT, UserSeed: cred.Seed, InboxPrefix: cred.InboxPrefix, ExpiresUnix: cred.Expires.Unix()}, nil
}
