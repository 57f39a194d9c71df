package selftrace

import "errors"

// ErrChild reports that the child broke the handshake or failed.
var ErrChild = errors.New("selftrace: child failed")
