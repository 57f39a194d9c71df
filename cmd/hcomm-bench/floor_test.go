package main

import "testing"

// The floor loop does exactly the I/Os asked, reads and writes, over
// several runs on one ring, and closes on its own goroutine.
func TestFloorUring(t *testing.T) {
	for _, write := range []bool{false, true} {
		o := &options{quick: true}
		if _, _, err := benchDir(o); err != nil {
			t.Skip(err)
		}
		r, err := setupFloorUring(o, write, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 7, fileQD, 3 * fileQD, 1000} {
			if err := r.run(n); err != nil {
				t.Fatalf("write %v, %d I/Os: %v", write, n, err)
			}
		}
		if err := r.close(); err != nil {
			t.Fatal(err)
		}
	}
}
