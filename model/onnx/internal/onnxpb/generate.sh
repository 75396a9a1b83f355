#!/bin/sh
# Regenerates onnx.pb.go from ONNX's onnx.proto (Apache-2.0), as Debian's
# python3-onnx 1.12 ships it, with pinned tools: protoc from Debian
# (protobuf-compiler), protoc-gen-go from the module proxy. The proto
# package is renamed from onnx to fedpq.onnx so that these types cannot
# clash in the protobuf registry with another Go copy of onnx.proto
# linked into the same binary; the wire format (field numbers) is the same.
set -eu
cd "$(dirname "$0")"
src=/usr/lib/python3/dist-packages/onnx/onnx.proto
if [ ! -f "$src" ]; then
	apt-get update && apt-get install -y python3-onnx
fi
if ! command -v protoc >/dev/null; then
	apt-get update && apt-get install -y protobuf-compiler
fi
GOBIN="$(go env GOPATH)/bin"
go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
sed -e 's/^package onnx;$/package fedpq.onnx;/' "$src" > onnx.proto
PATH="$GOBIN:$PATH" protoc --go_out=. --go_opt=paths=source_relative \
	--go_opt=Monnx.proto=github.com/fedpq/fedpq/model/onnx/internal/onnxpb onnx.proto
