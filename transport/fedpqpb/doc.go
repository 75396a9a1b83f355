// Package fedpqpb holds the Go code generated from fedpq.proto, the wire
// protocol between a fedpq server and its clients.
package fedpqpb

//go:generate ./generate.sh
