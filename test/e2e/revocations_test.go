package e2e

import (
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

func TestRevocations(t *testing.T) {
	operator, _ := nkeys.CreateOperator()
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	accountPub, _ := account.PublicKey()
	userPub, _ := user.PublicKey()
	claims := jwt.NewAccountClaims(accountPub)
	revokedAt := time.Unix(1_800_000_060, 0)
	claims.RevokeAt(userPub, revokedAt)
	token, err := claims.Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int64{}
	after, err := Revocations(map[string]string{TrustAccountKey: token, "operator.jwt": "x"})
	if err != nil {
		t.Fatal(err)
	}
	fresh := NewRevocations(before, after)
	if len(fresh) != 1 || fresh[userPub] != revokedAt.Unix() {
		t.Fatalf("new revocations %v, want %s at %d", fresh, userPub, revokedAt.Unix())
	}
	if len(NewRevocations(after, after)) != 0 {
		t.Fatal("the same list has new revocations")
	}
	if _, err := Revocations(map[string]string{}); err == nil {
		t.Fatal("a ConfigMap without the account JWT was read")
	}
	if _, err := Revocations(map[string]string{TrustAccountKey: "not.a.jwt"}); err == nil {
		t.Fatal("garbage was read")
	}
}
