package errs

import (
	"errors"
	"fmt"
	"testing"
)

func TestSentinels(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		msg     string
		matches []error
		not     []error
	}{
		{"ErrNotSupported", ErrNotSupported, "not supported", []error{ErrNotSupported, errors.ErrUnsupported}, []error{ErrClosed}},
		{"ErrClosed", ErrClosed, "closed", []error{ErrClosed}, []error{ErrNotSupported, errors.ErrUnsupported}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.msg {
				t.Errorf("message %q, want %q", got, tt.msg)
			}
			// As callers see it: wrapped with a package prefix and context.
			err := fmt.Errorf("pkg: op: %w", tt.err)
			for _, target := range tt.matches {
				if !errors.Is(err, target) {
					t.Errorf("errors.Is(%q, %v) = false, want true", err, target)
				}
			}
			for _, target := range tt.not {
				if errors.Is(err, target) {
					t.Errorf("errors.Is(%q, %v) = true, want false", err, target)
				}
			}
		})
	}
}
