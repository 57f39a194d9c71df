//go:build hcommdebug

package engine_test

import (
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/backend/memory"
	"github.com/hcomm-go/hcomm/engine"
)

// TestBytesAfterCloseDebug: with -tags hcommdebug,
// Bytes of a block after Free or after Close panics with a message that
// says what went wrong, instead of handing out memory that faults the
// process or belongs to someone else.
func TestBytesAfterCloseDebug(t *testing.T) {
	e, err := engine.Open(small(t, engine.Config{Backend: memory.New()}))
	must(t, err)
	freed := alloc(t, e, 4096)
	must(t, e.Free(freed))
	live := alloc(t, e, 4096)
	for _, c := range []struct {
		name   string
		b      engine.Block
		want   string
		before func()
	}{
		{"freed", freed, "freed block", func() {}},
		{"closed", live, "after its engine was closed", func() { must(t, e.Close()) }},
	} {
		c.before()
		func() {
			defer func() {
				p, _ := recover().(string)
				if !strings.Contains(p, c.want) {
					t.Errorf("%s block: Bytes panicked with %q, want a message with %q", c.name, p, c.want)
				}
			}()
			_ = c.b.Bytes()
		}()
	}
}
