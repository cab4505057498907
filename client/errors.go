package client

import (
	"errors"
	"fmt"
	"time"
)

// ErrWaitTooLong is wrapped by the *WaitError of a request that would have
// waited longer than WithMaxWait allows.
var ErrWaitTooLong = errors.New("wait longer than the transport's maximum")

// WaitError reports a request that was not sent because its quota would
// come back too late: after the context's deadline (Err is
// context.DeadlineExceeded) or beyond WithMaxWait (Err is ErrWaitTooLong).
// errors.Is sees through it, and through the *url.Error of http.Client.
type WaitError struct {
	Host   string        // scheme://host[:port]
	Policy string        // the quota policy that is spent; "" when unnamed
	Wait   time.Duration // how long it would have waited; 0 when unknown (waiting for an answer)
	Err    error
}

func (e *WaitError) Error() string {
	policy := "its quota"
	if e.Policy != "" {
		policy = fmt.Sprintf("quota %q", e.Policy)
	}
	return fmt.Sprintf("ratelimit/client: %s: %s is back in %s: %v", e.Host, policy, e.Wait, e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }
