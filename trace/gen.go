package trace

//go:generate go run mksyscalls.go
