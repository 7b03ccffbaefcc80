package xds

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// Limits of the checks made on a bearer token before any TokenReview.
const (
	// MaxTokenBytes is the longest bearer token looked at. A projected
	// ServiceAccount token is about 1 KiB; anything much longer is no
	// Kubernetes token, and is refused before it is decoded.
	MaxTokenBytes = 16 << 10
	// TokenClockSkew is how far the operator's clock may lag the
	// apiserver's: a token whose nbf (its issue time) lies up to this far
	// in the future is still reviewed. It is the apiserver's own leeway
	// for ServiceAccount tokens (go-jose's DefaultLeeway), so that no
	// token the apiserver would accept is refused here.
	TokenClockSkew = time.Minute
)

// Reasons a token is refused before any TokenReview, each the label of the
// weighstation_operator_xds_refused_total counter and named in the
// refusal's message.
const (
	reasonTokenShape    = "token_shape"
	reasonTokenAudience = "token_audience"
	reasonTokenExpired  = "token_expired"
	reasonTokenNotYet   = "token_not_yet_valid"
	reasonTokenUnbound  = "token_not_pod_bound"
	reasonTokenPod      = "token_pod_unknown"
)

// tokenClaims are the claims of a projected ServiceAccount token that the
// operator reads. They are unverified until a TokenReview (or the cache of
// one) vouches for the token: they only ever refuse, never admit.
type tokenClaims struct {
	Audience  audience `json:"aud"`
	Expiry    *int64   `json:"exp"`
	NotBefore *int64   `json:"nbf"`
	// Kubernetes is the binding a pod-bound token carries: the pod's
	// name and UID, and its namespace.
	Kubernetes *struct {
		Namespace string `json:"namespace"`
		Pod       *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// audience is a JWT's aud claim: one string or a list of them (RFC 7519,
// 4.1.3).
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte(`"`)) {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = audience{s}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	*a = list
	return nil
}

// refuseToken is a refusal of the caller's token before any TokenReview:
// reason is what it is counted under, and the message names the check.
func refuseToken(reason, format string, args ...any) *refusal {
	return &refusal{code: codes.Unauthenticated, reason: reason, msg: "refused before review (" + reason + "): " + fmt.Sprintf(format, args...)}
}

// boundPod is what a token claims of its pod.
type boundPod struct {
	namespace, name, uid string
	expiry               time.Time
}

// checkToken makes the checks that need no apiserver: the token is a JWT
// (three base64url parts, a header and claims that parse), for aud, not
// expired and already valid at now (nbf, with TokenClockSkew), and bound
// to a pod. Whatever passes still needs a TokenReview: the signature is
// not checked here.
func checkToken(token, aud string, now time.Time) (boundPod, error) {
	if len(token) > MaxTokenBytes {
		return boundPod{}, refuseToken(reasonTokenShape, "the token is %d bytes, more than the %d a ServiceAccount token may be", len(token), MaxTokenBytes)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return boundPod{}, refuseToken(reasonTokenShape, "the token is not a JWT: %d dot-separated parts, not 3", len(parts))
	}
	for i, name := range []string{"header", "claims", "signature"} {
		if parts[i] == "" {
			return boundPod{}, refuseToken(reasonTokenShape, "the token's %s is empty", name)
		}
	}
	header, err := decodePart(parts[0])
	if err != nil {
		return boundPod{}, refuseToken(reasonTokenShape, "the token's header is not base64url: %v", err)
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(header, &h); err != nil {
		return boundPod{}, refuseToken(reasonTokenShape, "the token's header is not JSON: %v", err)
	}
	if h.Alg == "" || strings.EqualFold(h.Alg, "none") {
		return boundPod{}, refuseToken(reasonTokenShape, "the token's header names no signing algorithm (alg %q)", h.Alg)
	}
	if _, err := base64.RawURLEncoding.DecodeString(parts[2]); err != nil {
		return boundPod{}, refuseToken(reasonTokenShape, "the token's signature is not base64url: %v", err)
	}
	payload, err := decodePart(parts[1])
	if err != nil {
		return boundPod{}, refuseToken(reasonTokenShape, "the token's claims are not base64url: %v", err)
	}
	var c tokenClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return boundPod{}, refuseToken(reasonTokenShape, "the token's claims are not JSON: %v", err)
	}
	if !slices.Contains(c.Audience, aud) {
		return boundPod{}, refuseToken(reasonTokenAudience, "the token is not for audience %q (it is for %q)", aud, []string(c.Audience))
	}
	if c.Expiry == nil {
		return boundPod{}, refuseToken(reasonTokenExpired, "the token has no expiry (exp); use a projected ServiceAccount token")
	}
	exp := time.Unix(*c.Expiry, 0)
	if !exp.After(now) {
		return boundPod{}, refuseToken(reasonTokenExpired, "the token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if c.NotBefore != nil {
		if nbf := time.Unix(*c.NotBefore, 0); nbf.After(now.Add(TokenClockSkew)) {
			return boundPod{}, refuseToken(reasonTokenNotYet, "the token is not valid before %s (nbf), more than %s from now", nbf.UTC().Format(time.RFC3339), TokenClockSkew)
		}
	}
	k := c.Kubernetes
	if k == nil || k.Namespace == "" || k.Pod == nil || k.Pod.Name == "" || k.Pod.UID == "" {
		return boundPod{}, refuseToken(reasonTokenUnbound, "the token is not bound to a pod (no kubernetes.io namespace, pod name and pod UID): use a projected ServiceAccount token")
	}
	return boundPod{namespace: k.Namespace, name: k.Pod.Name, uid: k.Pod.UID, expiry: exp}, nil
}

// decodePart decodes a JWT part: base64url without padding (RFC 7515),
// tolerating padding.
func decodePart(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}
