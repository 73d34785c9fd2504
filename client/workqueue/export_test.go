package workqueue

import "time"

// ArmedAt returns the deadline the timer goroutine last armed its timer
// for, so that tests step a fake clock only once the timer is set.
func (q *Queue[K]) ArmedAt() time.Time { return time.Unix(0, q.armed.Load()) }
