package testutil

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestLeaked(t *testing.T) {
	tests := []struct {
		name        string
		before, now FDs
		want        []string
	}{
		{"same", FDs{0: "/dev/null", 3: "pipe:[1]"}, FDs{0: "/dev/null", 3: "pipe:[1]"}, nil},
		{"closed", FDs{0: "/dev/null", 3: "pipe:[1]"}, FDs{0: "/dev/null"}, nil},
		{"reused", FDs{3: "pipe:[1]"}, FDs{3: "anon_inode:[eventfd]"}, nil},
		{"one new", FDs{3: "pipe:[1]"}, FDs{3: "pipe:[1]", 4: "anon_inode:[io_uring]"}, []string{"4 -> anon_inode:[io_uring]"}},
		{"reused and new", FDs{3: "pipe:[1]"}, FDs{3: "pipe:[2]", 4: "pipe:[3]"}, []string{"3 -> pipe:[2]", "4 -> pipe:[3]"}},
		{"/proc ignored", FDs{3: "pipe:[1]"}, FDs{3: "pipe:[1]", 5: "/proc/1/fd"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.before.Leaked(tc.now); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Leaked = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCheckFDs: a pipe left open fails the (fake) test at cleanup and is
// named; closed before cleanup, it does not.
func TestCheckFDs(t *testing.T) {
	for _, leak := range []bool{false, true} {
		f := &fakeTB{TB: t}
		CheckFDs(f)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if !leak {
			r.Close()
			w.Close()
		}
		f.runCleanups()
		if leak {
			r.Close()
			w.Close()
		}
		if f.failed != leak {
			t.Fatalf("leak %v: failed %v (%s)", leak, f.failed, f.msg)
		}
		if leak && strings.Count(f.msg, "pipe:[") != 2 {
			t.Errorf("the message should name both pipe fds: %s", f.msg)
		}
	}
}
