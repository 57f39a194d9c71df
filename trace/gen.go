package trace

//go:generate go run mksyscalls.go -o zsyscalls_amd64.go
