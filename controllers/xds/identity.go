package xds

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Identity is the pod a stream proved it is.
type Identity struct {
	Namespace      string
	Pod            string
	PodUID         string
	ServiceAccount string
	// Expiry is when the presented token stops being valid; the stream
	// ends then, and the sidecar reconnects with its refreshed token.
	Expiry time.Time
}

// key is the identity's PodKey.
func (id Identity) key() string { return PodKey(id.Namespace, id.Pod, id.PodUID) }

// NodeID is the node ID this identity must present.
func (id Identity) NodeID() string { return id.Namespace + "/" + id.Pod }

// Authenticator turns a bearer token into the pod it belongs to.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// Keys of a pod-bound ServiceAccount token's user.extra in a TokenReview.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// errUnauthenticated wraps every refusal of a caller's credentials.
var errUnauthenticated = errors.New("unauthenticated")

// TokenReviewer authenticates with a TokenReview naming Audience, and then
// checks that the pod the token is bound to exists with that UID.
type TokenReviewer struct {
	// Client creates TokenReviews (RBAC: create tokenreviews).
	Client client.Client
	// Pods reads Pods; the manager's cache, which holds sidecar pods only.
	Pods client.Reader
	// Audience is the audience the sidecar's projected token is for.
	Audience string
}

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// Authenticate implements Authenticator: a TokenReview, then the pod.
// It has no cache and no limit: the operator puts a TokenGate in front.
func (r TokenReviewer) Authenticate(ctx context.Context, token string) (Identity, error) {
	id, err := r.review(ctx, token)
	if err != nil {
		return Identity{}, err
	}
	if err := r.checkPod(ctx, id.Namespace, id.Pod, id.PodUID); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// review asks the apiserver who token is: the identity of a valid token
// for Audience bound to a pod, an errUnauthenticated for a token it does
// not accept as that, another error when the review itself failed. What
// it says of a token holds for that token's life, whatever happens to the
// pod later (checkPod says that).
func (r TokenReviewer) review(ctx context.Context, token string) (Identity, error) {
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{r.Audience}}}
	if err := r.Client.Create(ctx, review); err != nil {
		return Identity{}, fmt.Errorf("reviewing the token: %w", err)
	}
	st := review.Status
	if !st.Authenticated {
		return Identity{}, fmt.Errorf("%w: the token was not accepted: %s", errUnauthenticated, st.Error)
	}
	if !slices.Contains(st.Audiences, r.Audience) {
		return Identity{}, fmt.Errorf("%w: the token is not for audience %q (it is for %v)", errUnauthenticated, r.Audience, st.Audiences)
	}
	ns, sa, ok := serviceAccountOf(st.User.Username)
	if !ok {
		return Identity{}, fmt.Errorf("%w: %q is not a ServiceAccount", errUnauthenticated, st.User.Username)
	}
	podName, podUID := first(st.User.Extra[extraPodName]), first(st.User.Extra[extraPodUID])
	if podName == "" || podUID == "" {
		return Identity{}, fmt.Errorf("%w: the token of %s/%s is not bound to a pod (use a projected ServiceAccount token)", errUnauthenticated, ns, sa)
	}
	expiry, err := tokenExpiry(token)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", errUnauthenticated, err)
	}
	return Identity{Namespace: ns, Pod: podName, PodUID: podUID, ServiceAccount: sa, Expiry: expiry}, nil
}

// checkPod checks that the pod namespace/name exists with uid in the
// operator's pod cache, which holds the sidecar pods that count: a token
// of a pod deleted, re-created, finished or without the sidecar label is
// refused, whatever the token's own validity.
func (r TokenReviewer) checkPod(ctx context.Context, ns, name, uid string) error {
	// Metadata is all the check needs, and all the operator's pod cache
	// holds.
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := r.Pods.Get(ctx, k8stypes.NamespacedName{Namespace: ns, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: pod %s/%s does not exist or does not carry the sidecar label", errUnauthenticated, ns, name)
		}
		return fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
	}
	if string(pod.UID) != uid {
		return fmt.Errorf("%w: the token is bound to pod %s/%s with UID %s, but that pod's UID is %s", errUnauthenticated, ns, name, uid, pod.UID)
	}
	return nil
}

func first(v authenticationv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// serviceAccountOf reads "system:serviceaccount:<namespace>:<name>": the
// review's extra has the pod but not its namespace.
func serviceAccountOf(username string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != ""
}

// tokenExpiry reads a JWT's exp claim. The TokenReview has already checked
// the signature; its status carries no expiry, so it is read here.
func tokenExpiry(token string) (time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("the token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, fmt.Errorf("decoding the token's claims: %w", err)
	}
	var claims struct {
		Exp *int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return time.Time{}, fmt.Errorf("decoding the token's claims: %w", err)
	}
	if claims.Exp == nil {
		return time.Time{}, errors.New("the token has no expiry (exp); use a projected ServiceAccount token")
	}
	return time.Unix(*claims.Exp, 0), nil
}
