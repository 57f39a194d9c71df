package uring_test

import (
	"fmt"

	"github.com/hcomm-go/hcomm/internal/uring"
)

// One batch of NOPs: queue, submit with one io_uring_enter, reap.
func ExampleRing() {
	u, err := uring.New(uring.Config{Entries: 8}) // binds this goroutine to its thread
	if err != nil {
		fmt.Println(err)
		return
	}
	defer u.Close() // same goroutine
	for i := 0; i < 4; i++ {
		e := u.GetSQE()
		e.PrepNop()
		e.SetUserData(uint64(i))
	}
	if _, err := u.SubmitAndWait(4); err != nil {
		fmt.Println(err)
		return
	}
	cqes := make([]uring.CQE, 8)
	n, _ := u.PeekCQEs(cqes)
	for _, c := range cqes[:n] {
		fmt.Println("nop", c.UserData(), "res", c.Res())
	}
	fmt.Println("enters", u.Stats().Enters)
	// Output:
	// nop 0 res 0
	// nop 1 res 0
	// nop 2 res 0
	// nop 3 res 0
	// enters 1
}
