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

func TestNested(t *testing.T) {
	inner := fmt.Errorf("pkg: lookup x: %w", ErrClosed)
	tests := []struct {
		name string
		err  error
		msg  string
	}{
		{"same package", fmt.Errorf("pkg: open y: %w", Nested("pkg: ", inner)), "pkg: open y: lookup x: closed"},
		{"other package", fmt.Errorf("pkg: open y: %w", Nested("pkg: ", fmt.Errorf("other: z: %w", ErrClosed))), "pkg: open y: other: z: closed"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.msg {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.msg)
		}
		if !errors.Is(tt.err, ErrClosed) {
			t.Errorf("%s: errors.Is(ErrClosed) = false through Nested", tt.name)
		}
	}
	if Nested("pkg: ", nil) != nil {
		t.Error("Nested(nil) != nil")
	}
}
