//go:build hcommdebug

package engine

// debug turns misuse that would otherwise fault the process or corrupt
// memory silently (Block.Bytes after Free or Close) into panics with a
// message. Build with -tags hcommdebug.
const debug = true
