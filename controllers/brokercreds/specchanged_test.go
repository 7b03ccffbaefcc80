package brokercreds

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// Only a spec change (a new generation) re-signs a namespace's account:
// the status writes that follow every change of a Topic or Subscription
// (several per object, more with reports) must not, since each re-sign
// lists the namespace's policies and pushes the account to every broker.
func TestOnlySpecChangesResignAccounts(t *testing.T) {
	topic := func(gen int64, status string) *v1alpha1.Topic {
		tp := &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: gen}}
		tp.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionStatus(status)}}
		return tp
	}
	tests := []struct {
		name     string
		old, obj any
		want     bool
	}{
		{"a status write", topic(3, "False"), topic(3, "True"), false},
		{"a spec change", topic(3, "True"), topic(4, "True"), true},
		{"an object it cannot read", "tombstone", topic(4, "True"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := specChanged(tc.old, tc.obj); got != tc.want {
				t.Fatalf("specChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
