package hdma_test

import (
	"context"
	"log/slog"
	"testing"
)

// testHandler sends slog records to t.Log, so device warnings show with the
// test that caused them and only when it fails or runs with -v.
type testHandler struct{ t testing.TB }

func (h testHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h testHandler) Handle(_ context.Context, r slog.Record) error {
	h.t.Log(r.Level, r.Message)
	return nil
}
func (h testHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h testHandler) WithGroup(string) slog.Handler      { return h }

func quietLogger(t testing.TB) *slog.Logger { return slog.New(testHandler{t}) }
