package broadcast

import "testing"

func TestNotifyClosesTheChannelWaitedOnAndStartsANewOne(t *testing.T) {
	s := New()
	first := s.C()
	select {
	case <-first:
		t.Fatal("closed before Notify")
	default:
	}
	s.Notify()
	select {
	case <-first:
	default:
		t.Fatal("Notify did not close the channel returned before it")
	}
	select {
	case <-s.C():
		t.Fatal("the channel after Notify is already closed")
	default:
	}
}
