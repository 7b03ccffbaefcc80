package injectionproof_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/weighstation/weighstation/controllers/injectionproof"
)

const operatorNS = "mesh"

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func keySecret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: operatorNS, Name: injectionproof.SecretName}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// Replicas share one key through the Secret: the first creates it, the
// others read it; a Secret created empty is filled; a deleted Secret comes
// back with the key the replicas hold; a replaced key is adopted; a key of
// the wrong length is refused, not overwritten.
func TestKeeper(t *testing.T) {
	ctx := context.Background()
	newKeeper := func(c client.Client) *injectionproof.Keeper {
		return &injectionproof.Keeper{Reader: c, Writer: c, Namespace: operatorNS, Log: testr.New(t)}
	}
	t.Run("replicas share the key", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(newScheme(t)).Build()
		a, b := newKeeper(c), newKeeper(c)
		if _, ok := a.Key(); ok {
			t.Fatal("a Keeper has a key before its first Sync")
		}
		if err := a.Verify(injectedPod(t)); !errors.Is(err, injectionproof.ErrNoKey) {
			t.Errorf("Verify before the key: %v, want ErrNoKey", err)
		}
		for _, k := range []*injectionproof.Keeper{a, b} {
			if err := k.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		ka, _ := a.Key()
		kb, _ := b.Key()
		if len(ka) != 32 || !bytes.Equal(ka, kb) || !bytes.Equal(keySecret(t, c).Data[injectionproof.SecretKey], ka) {
			t.Fatalf("keys %x and %x, Secret %x: want one 32-byte key", ka, kb, keySecret(t, c).Data[injectionproof.SecretKey])
		}

		// Deleted: written back with the key held.
		if err := c.Delete(ctx, keySecret(t, c)); err != nil {
			t.Fatal(err)
		}
		if err := b.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(keySecret(t, c).Data[injectionproof.SecretKey], ka) {
			t.Error("a deleted Secret came back with a new key: every proof would break")
		}

		// Replaced: adopted.
		s := keySecret(t, c)
		s.Data[injectionproof.SecretKey] = bytes.Repeat([]byte{1}, 32)
		if err := c.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if k, _ := a.Key(); !bytes.Equal(k, bytes.Repeat([]byte{1}, 32)) {
			t.Errorf("key %x after the Secret was replaced, want the new one", k)
		}
	})
	t.Run("an empty Secret is filled", func(t *testing.T) {
		empty := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: injectionproof.SecretName}}
		c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(empty).Build()
		k := newKeeper(c)
		if err := k.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if key, _ := k.Key(); len(key) != 32 || !bytes.Equal(keySecret(t, c).Data[injectionproof.SecretKey], key) {
			t.Errorf("key %x, Secret %v", key, keySecret(t, c).Data)
		}
	})
	t.Run("a key of the wrong length", func(t *testing.T) {
		bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: injectionproof.SecretName},
			Data: map[string][]byte{injectionproof.SecretKey: []byte("short")}}
		c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(bad).Build()
		err := newKeeper(c).Sync(ctx)
		if err == nil || !strings.Contains(err.Error(), "hmac-sha256.key must be 32 bytes, it has 5") {
			t.Errorf("Sync: %v, want a refusal naming the entry and its length", err)
		}
		if got := keySecret(t, c).Data[injectionproof.SecretKey]; string(got) != "short" {
			t.Error("the Keeper overwrote a key it did not write")
		}
	})
}

// VerifyPod reads the pod and checks that it is the token's pod (its UID)
// and that its proof verifies.
func TestVerifyPod(t *testing.T) {
	ctx := context.Background()
	pod := injectedPod(t)
	pod.UID = "uid-1"
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(pod).Build()
	keys := injectionproof.StaticKey(key)
	if err := injectionproof.VerifyPod(ctx, c, keys, "shop", "app", "uid-1"); err != nil {
		t.Errorf("VerifyPod: %v", err)
	}
	for _, tc := range []struct {
		name, pod string
		uid       types.UID
		keys      injectionproof.KeySource
		want      string
	}{
		{"another UID", "app", "uid-2", keys, "pod shop/app has UID uid-1, not uid-2"},
		{"no such pod", "gone", "uid-1", keys, "pod shop/gone does not exist"},
		{"no key", "app", "uid-1", injectionproof.StaticKey(nil), "not loaded yet"},
		{"another key", "app", "uid-1", injectionproof.StaticKey(bytes.Repeat([]byte{9}, 32)), "pod shop/app: the pod's sidecar is not one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := injectionproof.VerifyPod(ctx, c, tc.keys, "shop", tc.pod, tc.uid)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("VerifyPod: %v, want it to say %q", err, tc.want)
			}
		})
	}
}
