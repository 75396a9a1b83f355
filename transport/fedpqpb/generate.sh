#!/bin/sh
# Regenerates the Go code of fedpq.proto with pinned tools: protoc from
# Debian (apt), the two Go plugins from the module proxy.
set -eu
cd "$(dirname "$0")"
if ! command -v protoc >/dev/null; then
	apt-get update && apt-get install -y protobuf-compiler
fi
GOBIN="$(go env GOPATH)/bin"
go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
PATH="$GOBIN:$PATH" protoc --go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative fedpq.proto
